"""Build the quality gates' offline artifacts once, at install time (``make install`` runs it):

- the ``harmful`` classifier (:mod:`quality.harmful_model`), trained and calibrated on the
  shipped prompt sets, saved under ``<venv>/share/assay-data/models/``;
- the eval-item cache of every built-in domain (:mod:`quality.detectors.contamination`), under
  ``<venv>/share/assay-data/cache/eval_items/``, so the first ingest in a fresh ``ASSAY_HOME``
  does not regenerate ~115 domains' eval sets.

Both are also built lazily on first use when missing; nothing here needs the network.

    python -m quality.build_artifacts [--skip-eval-cache]
"""

from __future__ import annotations

import argparse
import sys
import time


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m quality.build_artifacts", description=__doc__.split("\n\n")[0])
    parser.add_argument("--skip-eval-cache", action="store_true", help="only build the harmful classifier")
    parser.add_argument("--rebuild-model", action="store_true", help="retrain the classifier even if present")
    args = parser.parse_args(argv)
    from quality import harmful_model

    started = time.perf_counter()
    path = harmful_model.artifact_path()
    if path is None or args.rebuild_model:
        path = harmful_model.build()
        print(f"harmful classifier built: {path}", flush=True)
    else:
        print(f"harmful classifier present: {path}", flush=True)
    if not args.skip_eval_cache:
        from quality.detectors import contamination

        contamination.prebuild_eval_cache()
    print(f"quality artifacts ready in {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
