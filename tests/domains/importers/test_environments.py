"""The part every importer shares (domains.importers.environments), without any framework: ids and the
hash split that never moves an item when the source grows, the refusals of a split that cannot be made,
default names, and an imported folder as a domain (its items load with no framework; a source edited after
the import, or a record of another format, is refused with the command that fixes it)."""

from __future__ import annotations

import json

import pytest

from domains.base import DomainError
from domains.importers.environments import (FORMAT, ImportedItem, ImportRefused, assign_splits, content_id,
                                            default_name, environment_domain, hash_split, source_digest)
from domains.registry import load_registry


def _items(n: int, split: str | None = None) -> list[ImportedItem]:
    return [ImportedItem(id=f"q{i}", prompt=f"What is {i} + 1?", answer=str(i + 1), split=split) for i in range(n)]


def test_the_hash_split_keeps_every_item_where_it_was_when_the_source_grows():
    small = {r["id"]: r["split"] for r in assign_splits(_items(40), "hash", 0.5)}
    grown = {r["id"]: r["split"] for r in assign_splits(_items(400), "hash", 0.5)}
    assert all(grown[item] == split for item, split in small.items())
    eval_share = sum(s == "eval" for s in grown.values()) / len(grown)
    assert 0.4 < eval_share < 0.6  # the hash range's lower half, give or take
    assert hash_split("q1", 0.999) == "eval" and hash_split("q1", 0.001) == "train"


def test_the_sources_own_split_is_kept_and_refused_when_it_has_none():
    rows = assign_splits([*_items(3, "train"), ImportedItem("e1", "p?", "a", split="eval")], "source", 0.5)
    assert [r["split"] for r in rows] == ["train", "train", "train", "eval"]
    with pytest.raises(ImportRefused, match="no train/eval split of its own"):
        assign_splits(_items(4), "source", 0.5)
    with pytest.raises(ImportRefused, match="split 'test'"):
        assign_splits([*_items(2, "train"), ImportedItem("t", "p?", "a", split="test")], "source", 0.5)


@pytest.mark.parametrize("items, message", [
    ([ImportedItem("a", "p?", "1"), ImportedItem("a", "q?", "2")], "share the id 'a'"),
    ([ImportedItem("a", "  ", "1")], "empty prompt"),
    (_items(2, "eval"), "fell in eval"),
])
def test_splits_that_cannot_make_a_domain_are_refused(items, message):
    with pytest.raises(ImportRefused, match=message):
        assign_splits(items, "source" if items[0].split else "hash", 0.5)


def test_bad_split_settings_say_what_is_allowed():
    with pytest.raises(ImportRefused, match="--split-from must be one of source, hash"):
        assign_splits(_items(4), "random", 0.5)
    with pytest.raises(ImportRefused, match=r"--eval-share must be in \(0, 1\)"):
        assign_splits(_items(4), "hash", 1.0)


def test_content_ids_are_stable_and_tell_items_apart():
    assert content_id("What is 2?", "2") == content_id("What is 2?", "2") != content_id("What is 2?", "3")


@pytest.mark.parametrize("source, name", [
    ("examples/environments/inspect/capitals.py", "capitals"), ("tasks.py@sums_shown", "sums_shown"),
    ("mypkg.tasks:arith_task", "arith_task"), ("lm_eval:gsm8k/gsm8k.yaml", "gsm8k"),
    ("owner/reverse-text@0.1.2", "reverse_text"), ("reverse_text", "reverse_text"), ("9lives.yaml", "imported_9lives"),
])
def test_default_names(source, name):
    assert default_name(source) == name


def _imported_folder(root, name="toy_import", kind="inspect"):
    """An imported environment as import_environment leaves it, written by hand: no framework needed."""
    folder = root / name
    (folder / "source").mkdir(parents=True)
    (folder / "source" / "task.py").write_text("# the task\n")
    rows = assign_splits(_items(20), "hash", 0.5)
    (folder / "items.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    record = {"format": FORMAT, "kind": kind, "name": name, "source": "task.py", "options": {}, "split_from": "hash",
              "eval_share": 0.5, "min_recall": 0.0, "package": "inspect-ai", "version": "0.3.285",
              "description": "a toy", "tags": ["toy"], "settings": {}, "notes": [],
              "counts": {s: sum(r["split"] == s for r in rows) for s in ("train", "eval")},
              "digest": source_digest(folder / "source"), "imported": "2026-12-06T00:00:00Z"}
    (folder / "import.json").write_text(json.dumps(record))
    return folder, rows


def test_an_imported_folder_is_a_domain_whose_items_load_without_the_framework(tmp_path):
    folder, rows = _imported_folder(tmp_path / "environments")
    domain = environment_domain(folder)
    assert domain.name == "toy_import" and {"imported", "inspect", "toy"} <= set(domain.tags)
    assert domain.gate_thresholds["min_recall"] == 0.0  # measured on the card, not enforced
    evals = domain.generate("eval", 100)
    assert [r["id"] for r in evals] == [r["id"] for r in rows if r["split"] == "eval"]  # the source's order
    trains = {r["id"] for r in domain.generate("train", 100, seed=3)}
    assert trains == {r["id"] for r in rows if r["split"] == "train"} and not trains & {r["id"] for r in evals}
    registry = load_registry(None, include_builtins=False, environments=tmp_path / "environments")
    assert registry.names == ["toy_import"] and not registry.errors


def test_a_source_edited_after_the_import_is_refused_until_imported_again(tmp_path):
    folder, _ = _imported_folder(tmp_path / "environments")
    (folder / "source" / "task.py").write_text("# edited\n")
    with pytest.raises(DomainError, match="changed after it was imported: import it again .*--replace"):
        environment_domain(folder)
    registry = load_registry(None, include_builtins=False, environments=tmp_path / "environments")
    assert registry.names == [] and "changed after it was imported" in str(registry.errors[0])


def test_a_record_of_another_format_is_refused(tmp_path):
    folder, _ = _imported_folder(tmp_path / "environments")
    record = json.loads((folder / "import.json").read_text())
    (folder / "import.json").write_text(json.dumps({**record, "format": FORMAT + 1}))
    with pytest.raises(DomainError, match="import the environment again"):
        environment_domain(folder)
