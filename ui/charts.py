"""Altair charts of the dashboard: pure functions from a frame to a chart, every chart titled and
every axis titled as "quantity (unit)". Scores are fractions in the lake; charts show percent
(score) and percentage points (deltas), so a 0.03 drop reads as "-3 pts".

Titles must show whole at the widths people use (1440 and 1024 px, half-width columns included):
an axis title is short (it may not be longer than its axis: a 240 px chart has ~150 px of y
axis), the chart title says the rest, and every chart keeps :data:`PADDING` around its drawing so
no title touches the element's edge. tests/ui/test_browser.py measures every chart on every page.
"""

from __future__ import annotations

import altair as alt
import polars as pl

STATUS_COLOURS = {"regressed": "#d62728", "warn": "#ff9f1c", "underpowered": "#9467bd",
                  "not_comparable": "#8c564b", "improved": "#2ca02c", "unchanged": "#c7c7c7"}
STATUS_LABELS = {"regressed": "regression (protected: blocks)", "warn": "significant drop (warn)",
                 "underpowered": "underpowered (test cannot flag a drop)",
                 "not_comparable": "not comparable (different generation configs)",
                 "improved": "improved (CI > 0)", "unchanged": "unchanged"}
VERDICT_COLOURS = {"regression": "#d62728", "warn": "#ff9f1c", "underpowered": "#9467bd", "ok": "#2ca02c"}
# space kept around every chart's drawing (px): titles never touch the edge of their element
PADDING = {"left": 8, "right": 8, "top": 12, "bottom": 8}  # top: a title with a subtitle needs more


def _pandas(frame: pl.DataFrame):
    return frame.to_pandas()


def _framed(chart):
    """``chart`` with :data:`PADDING` (every public chart function returns through here)."""
    return chart.properties(padding=PADDING)


def _title(text: str, subtitle: str) -> alt.Title:
    """A short title and one line under it that says the rest (a long title is cut at narrow widths)."""
    return alt.Title(text, subtitle=subtitle, subtitlePadding=6)


def verdict_heatmap(cells: pl.DataFrame, domains: list[str]) -> alt.Chart:
    """Domains (rows, in the given order) x checkpoints (columns, oldest left), coloured by status,
    labelled with the delta in points."""
    data = cells.filter(pl.col("domain").is_in(domains)).with_columns(
        (pl.col("delta") * 100).round(1).alias("delta_pts"),
        (pl.col("ci_low") * 100).round(1).alias("ci_low_pts"),
        (pl.col("ci_high") * 100).round(1).alias("ci_high_pts"),
        (pl.col("mde") * 100).round(1).alias("mde_pts"),
        pl.col("status").replace_strict(STATUS_LABELS, default="unchanged").alias("status_label"),
    )
    checkpoints = (data.select("candidate", "position").unique().sort("position")["candidate"].to_list()
                   if data.height else [])
    base = alt.Chart(_pandas(data)).encode(
        x=alt.X("candidate:N", sort=checkpoints, title="candidate checkpoint (oldest → newest)",
                axis=alt.Axis(labelAngle=-35, labelLimit=160)),
        y=alt.Y("domain:N", sort=domains, title="domain"),
    )
    rects = base.mark_rect(stroke="white", strokeWidth=1).encode(
        color=alt.Color("status_label:N", title="verdict vs champion", legend=alt.Legend(labelLimit=320),
                        scale=alt.Scale(domain=list(STATUS_LABELS.values()), range=list(STATUS_COLOURS.values()))),
        tooltip=[alt.Tooltip("domain:N"), alt.Tooltip("candidate:N", title="candidate"),
                 alt.Tooltip("baseline:N", title="champion (baseline)"),
                 alt.Tooltip("delta_pts:Q", title="Δ score (pts)"),
                 alt.Tooltip("ci_low_pts:Q", title="CI low (pts)"), alt.Tooltip("ci_high_pts:Q", title="CI high (pts)"),
                 alt.Tooltip("q:Q", title="q (BH)", format=".3f"), alt.Tooltip("mde_pts:Q", title="MDE (pts)"),
                 alt.Tooltip("verdict:N")],
    )
    labels = base.mark_text(fontSize=10).encode(text=alt.Text("delta_pts:Q", format="+.1f"))
    # one 24 px band per domain, so every row keeps its label however many are shown
    return _framed((rects + labels).properties(height=alt.Step(24), title="Δ score vs champion (percentage points)"))


def gate_pass_rates(gates: pl.DataFrame) -> alt.Chart:
    return alt.Chart(_pandas(gates)).mark_line(point=True).encode(
        x=alt.X("evaluated_at:T", title="gate evaluation time (UTC)"),
        y=alt.Y("rows_passed_pct:Q", title="rows passed (%)", scale=alt.Scale(zero=False)),
        color=alt.Color("gate:N", title="gate"),
        tooltip=["evaluation", "gate", "evaluated_at", "expectations", "expectations_passed",
                 "rows_checked", "rows_failed", alt.Tooltip("rows_passed_pct:Q", format=".1f")],
    ).properties(height=260, title="Gate pass rate per evaluation (row checks passed)").properties(padding=PADDING)


def quarantine_reasons(reasons: pl.DataFrame) -> alt.Chart:
    return alt.Chart(_pandas(reasons)).mark_bar().encode(
        x=alt.X("day:T", title="ingest day (UTC)", timeUnit="yearmonthdate"),
        y=alt.Y("rows:Q", title="rows (count)", stack=True),
        color=alt.Color("reason:N", title="reason code"),
        tooltip=["day:T", "reason", "rows"],
    ).properties(height=260, title="Quarantined rows per day").properties(padding=PADDING)


def difficulty_histogram(difficulty: pl.DataFrame) -> alt.Chart:
    """The gate's latest difficulty evaluation; items without a measured pass rate (heuristic or
    metadata estimates) are placed at ``1 - difficulty``, and the title names the estimator."""
    methods = sorted(set(difficulty["method"].drop_nulls().to_list())) if "method" in difficulty.columns else []
    data = difficulty.with_columns((pl.coalesce("pass_rate", 1 - pl.col("difficulty")) * 100).alias("pass_rate_pct"),
                                   pl.when(pl.col("in_band")).then(pl.lit("admitted (in band)"))
                                   .otherwise(pl.lit("out of band")).alias("band"))
    return alt.Chart(_pandas(data)).mark_bar().encode(
        x=alt.X("pass_rate_pct:Q", bin=alt.Bin(maxbins=20, extent=[0, 100]), title="pass rate (%)"),
        y=alt.Y("count():Q", title="items (count)"),
        color=alt.Color("band:N", title="band", legend=alt.Legend(orient="bottom", direction="vertical"),
                        scale=alt.Scale(domain=["admitted (in band)", "out of band"], range=["#1f77b4", "#c7c7c7"])),
        tooltip=[alt.Tooltip("count():Q", title="items")],
    ).properties(height=260, title=_title(
        "Difficulty of train items", f"lower = harder; estimate: {', '.join(methods) or '?'}")).properties(padding=PADDING)


def score_trend(trend: pl.DataFrame, champion: str | None) -> alt.Chart:
    data = trend.with_columns(
        (pl.col("mean") * 100).alias("score_pct"), (pl.col("ci_low") * 100).alias("ci_low_pct"),
        (pl.col("ci_high") * 100).alias("ci_high_pct"),
        pl.when(pl.col("checkpoint") == (champion or "")).then(pl.lit("champion"))
        .otherwise(pl.lit("checkpoint")).alias("role"))
    order = data["checkpoint"].to_list()
    x = alt.X("checkpoint:N", sort=order, title="checkpoint (oldest → newest)", axis=alt.Axis(labelAngle=-35))
    band = alt.Chart(_pandas(data)).mark_errorbar(thickness=2).encode(
        x=x, y=alt.Y("ci_low_pct:Q", title="eval score (%, 95% CI)"), y2="ci_high_pct:Q")
    line = alt.Chart(_pandas(data)).mark_line(point=True).encode(
        x=x, y=alt.Y("score_pct:Q", title="eval score (%, 95% CI)"),
        tooltip=["checkpoint", alt.Tooltip("score_pct:Q", title="score (%)", format=".1f"),
                 alt.Tooltip("ci_low_pct:Q", title="CI low (%)", format=".1f"),
                 alt.Tooltip("ci_high_pct:Q", title="CI high (%)", format=".1f"), "n", "k"])
    star = alt.Chart(_pandas(data.filter(pl.col("role") == "champion"))).mark_point(
        shape="diamond", size=160, filled=True, color="#2ca02c").encode(x=x, y="score_pct:Q")
    return _framed((band + line + star).properties(height=280, title=_title(
        "Score across checkpoints", "green diamond = champion")))


def score_vs_length(scores: pl.DataFrame, champion: str | None) -> alt.Chart:
    """Score by context length, one line per checkpoint, 95% CIs as error bars (log2 length axis)."""
    data = scores.with_columns(
        (pl.col("mean") * 100).alias("score_pct"), (pl.col("ci_low") * 100).alias("ci_low_pct"),
        (pl.col("ci_high") * 100).alias("ci_high_pct"),
        pl.when(pl.col("checkpoint") == (champion or "")).then(pl.col("checkpoint") + " (champion)")
        .otherwise(pl.col("checkpoint")).alias("policy"))
    x = alt.X("context_tokens:Q", scale=alt.Scale(type="log", base=2), title="context length (tokens)",
              axis=alt.Axis(values=sorted(set(data["context_tokens"].to_list()))))
    color = alt.Color("policy:N", title="checkpoint")
    bars = alt.Chart(_pandas(data)).mark_errorbar(thickness=2).encode(
        x=x, y=alt.Y("ci_low_pct:Q", title="eval score (%, 95% CI)"), y2="ci_high_pct:Q", color=color)
    line = alt.Chart(_pandas(data)).mark_line(point=True).encode(
        x=x, y=alt.Y("score_pct:Q", title="eval score (%, 95% CI)", scale=alt.Scale(domain=[0, 100])), color=color,
        tooltip=["policy", "domain", "context_tokens", alt.Tooltip("score_pct:Q", title="score (%)", format=".1f"),
                 alt.Tooltip("ci_low_pct:Q", title="CI low (%)", format=".1f"),
                 alt.Tooltip("ci_high_pct:Q", title="CI high (%)", format=".1f"), "n", "k"])
    return _framed((bars + line).properties(height=280, title=_title("Score vs context length",
                                                                     "one line per checkpoint")))


def regression_forest(rows: pl.DataFrame, limit: int = 40) -> alt.Chart:
    """Delta with CI per domain for the ``limit`` domains with the lowest delta (domains without
    one, not comparable, are left out)."""
    data = rows.filter(pl.col("delta").is_not_null()).sort("delta").head(limit).with_columns(
        (pl.col("delta") * 100).alias("delta_pts"), (pl.col("ci_low") * 100).alias("ci_low_pts"),
        (pl.col("ci_high") * 100).alias("ci_high_pts"))
    order = data["domain"].to_list()
    y = alt.Y("domain:N", sort=order, title="domain", axis=alt.Axis(labelOverlap=False))
    bars = alt.Chart(_pandas(data)).mark_rule().encode(
        y=y, x=alt.X("ci_low_pts:Q", title="Δ score vs baseline (percentage points, 95% CI)"), x2="ci_high_pts:Q")
    dots = alt.Chart(_pandas(data)).mark_point(filled=True, size=60).encode(
        y=y, x="delta_pts:Q",
        color=alt.Color("verdict:N", title="verdict",
                        scale=alt.Scale(domain=list(VERDICT_COLOURS), range=list(VERDICT_COLOURS.values()))),
        tooltip=["domain", alt.Tooltip("delta_pts:Q", title="Δ (pts)", format="+.1f"),
                 alt.Tooltip("q:Q", format=".3f"), "verdict", "protected"])
    zero = alt.Chart(_pandas(pl.DataFrame({"x": [0.0]}))).mark_rule(strokeDash=[4, 4], color="grey").encode(x="x:Q")
    return _framed((bars + dots + zero).properties(height=alt.Step(20),
                                                   title=f"Δ score with 95% CI, {data.height} lowest deltas"))


def training_curve(curves: pl.DataFrame, metric: str, title: str, axis: str, *, points: bool = False) -> alt.Chart:
    """One line per domain over training steps: ``title`` says what is plotted, ``axis`` is the y
    axis's short "quantity (unit)" (it must fit the axis: the title above carries the rest).
    ``points``: mark each recorded step (a sparse series, e.g. the in-loop validation)."""
    return alt.Chart(_pandas(curves.drop_nulls(metric))).mark_line(point=points).encode(
        x=alt.X("step:Q", title="training step (optimizer updates)"),
        y=alt.Y(f"{metric}:Q", title=axis, scale=alt.Scale(zero=False)),
        color=alt.Color("domain:N", title="domain"),
        tooltip=["step", "domain", alt.Tooltip(f"{metric}:Q", format=".4f")],
    ).properties(height=240, title=title).properties(padding=PADDING)


ROLE_COLOURS = {"current champion": "#2ca02c", "former champion": "#1f77b4", "base policy": "#7f7f7f",
                "never champion": "#9467bd"}
VERDICT_LABELS = {"in_band": "in band (trains)", "too_easy": "too easy (out of band)",
                  "too_hard": "too hard (out of band)"}


def pass_rate_histograms(items: pl.DataFrame, checkpoints: pl.DataFrame) -> alt.Chart:
    """One panel per policy checkpoint (rows in ``checkpoints``' order: base, then the champion
    history), items per pass-rate bucket; colour = the checkpoint's role (current champion green),
    faded = out of the domain's band (all-fail and all-pass items always are)."""
    from ui.queries import PASS_RATE_BUCKETS

    counts = (items.group_by("label", "role", "position", "bucket", "verdict").len("items")
              .with_columns(pl.col("bucket").map_elements(lambda b: PASS_RATE_BUCKETS[b], return_dtype=pl.Utf8)
                            .alias("pass_rate_bucket"),
                            pl.col("verdict").replace_strict(VERDICT_LABELS, default="?").alias("verdict_label"),
                            pl.when(pl.col("verdict") == "in_band").then(pl.lit("in band (trains)"))
                            .otherwise(pl.lit("out of band")).alias("band")))
    order = checkpoints.sort("position")["label"].to_list()
    return alt.Chart(_pandas(counts)).mark_bar().encode(
        x=alt.X("pass_rate_bucket:O", sort=list(PASS_RATE_BUCKETS), scale=alt.Scale(domain=list(PASS_RATE_BUCKETS)),
                title="pass rate over K samples (bucket)", axis=alt.Axis(labelAngle=-40)),
        y=alt.Y("items:Q", title="items (count)", stack=True),
        color=alt.Color("role:N", title="checkpoint", legend=alt.Legend(orient="bottom", direction="vertical"),
                        scale=alt.Scale(domain=list(ROLE_COLOURS), range=list(ROLE_COLOURS.values()))),
        opacity=alt.Opacity("band:N", title="gate's band", legend=alt.Legend(orient="bottom", direction="vertical"),
                            scale=alt.Scale(domain=["in band (trains)", "out of band"], range=[1.0, 0.35])),
        tooltip=[alt.Tooltip("label:N", title="checkpoint"), alt.Tooltip("pass_rate_bucket:O", title="pass rate"),
                 alt.Tooltip("verdict_label:N", title="verdict"), alt.Tooltip("items:Q", title="items")],
        row=alt.Row("label:N", sort=order, title=None, header=alt.Header(
            labelAngle=0, labelAlign="left", labelAnchor="start", labelOrient="top", labelFontWeight="bold",
            labelLimit=600)),
    ).properties(height=110, width=alt.Step(34), title=_title("Pass rate of the train items per policy checkpoint",
                                                     "oldest champion at the top")).properties(padding=PADDING)


def pass_rate_moves(checkpoints: pl.DataFrame) -> alt.Chart:
    """Mean pass rate and in-band share per checkpoint, in champion-history order (the role is in
    the tooltip and the point's colour is the measure)."""
    data = checkpoints.select(
        pl.format("{}. {}", pl.col("position") + 1, pl.col("checkpoint")).alias("checkpoint"), "role",
        (pl.col("mean_pass_rate") * 100).alias("mean pass rate"), (pl.col("in_band_share") * 100).alias("in-band share"))
    long = data.unpivot(index=["checkpoint", "role"], variable_name="measure", value_name="pct")
    order = data["checkpoint"].to_list()
    return alt.Chart(_pandas(long)).mark_line(point=True).encode(
        x=alt.X("checkpoint:N", sort=order, title="policy checkpoint (champion history, oldest → newest)",
                axis=alt.Axis(labelAngle=0, labelLimit=200)),
        y=alt.Y("pct:Q", title="train items (%)", scale=alt.Scale(domain=[0, 100])),
        color=alt.Color("measure:N", title="measure"),
        tooltip=["checkpoint", "role", "measure", alt.Tooltip("pct:Q", format=".1f", title="%")],
    ).properties(height=220, title="How the domain's difficulty moves as champions change").properties(padding=PADDING)


VARIANT_VERDICT_COLOURS = {"non_inferior": "#2ca02c", "underpowered": "#9467bd", "inferior": "#d62728"}


def variant_tradeoff(variants: pl.DataFrame, domains: pl.DataFrame) -> alt.Chart:
    """Speed vs quality: one point per (variant, domain) at the variant's speedup at batch 1 (log
    axis) and the domain's Δ vs the parent with its 95% CI, coloured by verdict. A variant's domains
    share its x, so each column reads as what that speed costs per domain; the dashed rules are the
    bars a ``fast`` variant clears (min_speedup to the right, every CI low above -margin)."""
    speed = variants.select("decision", "method", "speedup_batch1", "min_speedup")
    data = domains.join(speed, on="decision").filter(
        pl.col("delta").is_not_null() & (pl.col("speedup_batch1") > 0) & pl.col("speedup_batch1").is_finite()
    ).with_columns(
        (pl.col("delta") * 100).alias("delta_pts"), (pl.col("ci_low") * 100).alias("ci_low_pts"),
        (pl.col("ci_high") * 100).alias("ci_high_pts"), (pl.col("margin") * 100).alias("margin_pts"))
    # a verdict this page does not know yet still gets a (grey) colour rather than none
    verdicts = [*VARIANT_VERDICT_COLOURS, *sorted(set(data["verdict"].drop_nulls()) - set(VARIANT_VERDICT_COLOURS))]
    colour = alt.Color("verdict:N", title="non-inferiority verdict", scale=alt.Scale(
        domain=verdicts, range=[VARIANT_VERDICT_COLOURS.get(v, "#7f7f7f") for v in verdicts]))
    required = pl.DataFrame({"min_speedup": data["min_speedup"].drop_nulls().unique()})
    # padded on a log axis, so the outermost variants' labels and error bars are not cut at the edge
    ends = pl.concat([data["speedup_batch1"], required["min_speedup"]])
    span = [float(ends.min()) / 1.2, float(ends.max()) * 1.2] if ends.len() else alt.Undefined
    x = alt.X("speedup_batch1:Q", scale=alt.Scale(type="log", base=2, nice=False, domain=span),
              title="speedup over the parent at batch 1 (tokens/s ratio, log scale)")
    y_title = "Δ score vs parent (pts, 95% CI)"
    bars = alt.Chart(_pandas(data)).mark_rule(strokeWidth=2).encode(
        x=x, y=alt.Y("ci_low_pts:Q", title=y_title), y2="ci_high_pts:Q", color=colour)
    dots = alt.Chart(_pandas(data)).mark_point(filled=True, size=70).encode(
        x=x, y=alt.Y("delta_pts:Q", title=y_title), color=colour,
        tooltip=["variant", "method", "domain", "n",
                 alt.Tooltip("speedup_batch1:Q", title="speedup at batch 1", format=".2f"),
                 alt.Tooltip("delta_pts:Q", title="Δ (pts)", format="+.2f"),
                 alt.Tooltip("ci_low_pts:Q", title="CI low (pts)", format="+.2f"),
                 alt.Tooltip("ci_high_pts:Q", title="CI high (pts)", format="+.2f"),
                 alt.Tooltip("margin_pts:Q", title="margin (pts)", format=".1f"), "verdict"])
    labels = alt.Chart(_pandas(data.group_by("variant", "method", "speedup_batch1").agg(
        pl.col("ci_high_pts").max()))).mark_text(dy=-10, fontSize=11).encode(
        x=x, y="ci_high_pts:Q", text="method:N")
    floors = pl.DataFrame({"floor_pts": -data["margin_pts"].drop_nulls().unique()})
    speed_rule = alt.Chart(_pandas(required)).mark_rule(strokeDash=[6, 4], color="#1f77b4").encode(
        x="min_speedup:Q", tooltip=[alt.Tooltip("min_speedup:Q", title="speedup required (x)")])
    margin_rule = alt.Chart(_pandas(floors)).mark_rule(strokeDash=[6, 4], color="#d62728").encode(
        y="floor_pts:Q", tooltip=[alt.Tooltip("floor_pts:Q", title="-margin (pts)", format=".1f")])
    zero = alt.Chart(_pandas(pl.DataFrame({"y": [0.0]}))).mark_rule(color="grey", opacity=0.5).encode(y="y:Q")
    return _framed((zero + margin_rule + speed_rule + bars + dots + labels).properties(height=340, title=_title(
        "Speed against quality, per variant and domain",
        "dashed: the speedup a fast variant needs (blue) and -margin (red)")))


def variant_throughput(variants: pl.DataFrame) -> alt.Chart:
    """Tokens/s of each variant beside its parent's, at batch 1 and at the sweep's batch: a
    quantized or speculative variant that wins one prompt at a time can lose at a full batch, which
    decides whether it suits an interactive or a bulk use."""
    sides = []
    for setting, suffix in (("batch 1", "_batch1"), ("sweep batch", "_batch")):
        for side, prefix in (("parent", "parent_"), ("variant", "")):
            sides.append(variants.select(
                "variant", "batch", pl.lit(setting).alias("setting"), pl.lit(side).alias("side"),
                pl.col(f"{prefix}tokens_per_s{suffix}").alias("tokens_per_s")))
    data = pl.concat(sides).drop_nulls("tokens_per_s")
    chart = alt.Chart(_pandas(data)).mark_bar().encode(
        x=alt.X("variant:N", title="variant", axis=alt.Axis(labelAngle=-25, labelLimit=180, labelOverlap=False)),
        xOffset=alt.XOffset("side:N", sort=["parent", "variant"]),
        y=alt.Y("tokens_per_s:Q", title="decode throughput (tokens/s)"),
        color=alt.Color("side:N", title="measured", sort=["parent", "variant"], legend=alt.Legend(orient="bottom"),
                        scale=alt.Scale(domain=["parent", "variant"], range=["#7f7f7f", "#1f77b4"])),
        column=alt.Column("setting:N", title=None, sort=["batch 1", "sweep batch"]),
        tooltip=["variant", "side", "setting", alt.Tooltip("batch:Q", title="sweep batch (prompts)"),
                 alt.Tooltip("tokens_per_s:Q", title="tokens/s", format=".1f")],
    ).properties(height=240, width=alt.Step(24), title="Throughput, parent vs variant, measured in the same run")
    # batch-1 figures are a fraction of the batched ones: a shared axis would flatten them
    return _framed(chart.resolve_scale(y="independent"))
