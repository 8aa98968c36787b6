"""What each page charts: rows from the records and the decision, each chart's spec and its data table."""

from __future__ import annotations

from markupsafe import Markup

from iteralab.core import language
from iteralab.core.language import Text
from iteralab.decision.plan import span_range
from iteralab.decision.report import Report
from iteralab.pages import adapted, charts
from iteralab.pages.render import fmt
from iteralab.store.views import CampaignView


def chart(chart_id: str, title: str, description: str, rows: list[dict]) -> dict:
    """Make one chart's Vega-Lite spec from its rows and keep the rows beside it as its data table (columns in order)."""
    columns, category = list(rows[0]), charts.CATEGORY[chart_id]
    # Its rows named as the chart names them: the machine every configuration shares is said once, above (#45).
    labels = list(dict.fromkeys(row[category] for row in rows))
    names, machine = charts.shared_part(labels) if all(type(label) is str for label in labels) else (labels, None)
    short = dict(zip(labels, names, strict=True))
    # The rows as table cells, written here: a campaign's durations table has a row per trial.
    body = "".join("<tr>" + "".join(f"<td>{fmt(short[row[column]] if column == category else row[column])}</td>"
                                    for column in columns) + "</tr>" for row in rows)
    spec = charts.spec(chart_id, rows, title)
    return {"id": chart_id, "title": title, "description": description, "spec": spec, "script": Markup(charts.in_script(spec)),
            "columns": columns, "body": Markup(body), "machine": machine}


def campaign_charts(view: CampaignView) -> list[dict]:
    blocks = []
    # Rounded for the reader (the chart draws the same figures): milliseconds, never six decimals.
    duration_rows = [{"variant": v.label, "run_order": order, "seconds": round(seconds, 3)}
                     for v in view.variants for order, seconds in enumerate(v.seconds, start=1)]
    if duration_rows:
        blocks.append(chart("durations", Text("Measured window per successful trial"),
                             Text("Each dot is one successful trial's measured window; the black tick is the configuration's "
                                  "median. Failed trials have no duration and are listed under Failures."), duration_rows))
    memory_rows = []
    for v in view.variants:
        for key, label in (("gpu_peak_allocated_bytes", Text("GPU peak allocated")),
                           ("gpu_peak_reserved_bytes", Text("GPU peak reserved")),
                           ("host_peak_rss_bytes", Text("host peak RSS (process)"))):
            value, _ = v.peak(key)
            if value is not None:
                # Said here: the chart's legend shows the words themselves.
                memory_rows.append({"variant": v.label, "counter": label.say(), "mib": round(value / 2**20, 1)})
    if memory_rows:
        blocks.append(chart("memory", Text("Peak memory per configuration"),
                             Text("Highest value of each counter over the configuration's successful trials, in MiB (2^20 "
                                  "bytes). Counters are shown side by side, never added. GPU counters are absent when the "
                                  "variant ran without a GPU."), memory_rows))
    phase_rows = adapted.chart_rows(view)
    if phase_rows:
        blocks.append(chart("phase-memory", Text("Peak memory per phase and per configuration"),
                             Text("Highest value of each counter in each phase of an adaptation (the load, the first "
                                  "forward, backward and update, the measured window, validation, export) over the "
                                  "configuration's successful trials, in MiB (2^20 bytes): a panel per counter, never added. "
                                  "Host RSS is the runner process's above the baseline it held before the model loaded. GPU "
                                  "counters are absent when the variant ran without a GPU."), phase_rows))
    quality_rows = [{"variant": v.label, "bucket": bucket, "accuracy": round(value, 4)}
                    for v in view.variants for bucket, value in v.bucket_quality("accuracy").items() if value is not None]
    if quality_rows:
        blocks.append(chart("quality", Text("Accuracy per configuration and length bucket"),
                             Text("Median accuracy against gold labels over the configuration's successful trials, per planned "
                                  "length bucket."), quality_rows))
    return blocks


def decision_charts(report: Report) -> list[dict]:
    """Charts of the decision page: planned spend and projected hours against the window, each with its data."""
    blocks = []
    spend_rows = [{"configuration": row.label, "planned": float(row.plan.total), "currency": row.plan.currency}
                  for row in report.rows if row.plan]
    if spend_rows:
        blocks.append(chart("planned-spend", Text("Planned package spend per configuration"),
                             Text("The cheapest catalog package × lots covering the access window and the projected hours. "
                                  "Configurations on hardware the catalog does not price have no bar."), spend_rows))
    limit = report.question.limit_hours
    # An infeasible configuration is drawn too (its hours are real), and said so in its label (#37: int8-b8 was unmarked).
    hour_rows = [{"configuration": row.label if row.feasible else Text("{label} (not feasible)", label=row.label).say(),
                  "projected": span_range(row.hours).say(), "low_hours": round(row.hours[0], 4),
                  "high_hours": round(row.hours[2], 4), "lots": row.lots, "limit_hours": None if limit is None else float(limit),
                  "feasible": language.said(Text("yes") if row.feasible else Text("no"))}
                 for row in report.rows if row.hours]
    if hour_rows:
        marked = (Text("the red tick marks the hours available (the window, or the deadline when it comes first)")
                  if limit is not None else Text("no window or deadline was stated, so nothing is marked"))
        blocks.append(chart("projected-hours", Text("Projected processing hours against the window"),
                             Text("A projection, not a measurement: from the fastest to the slowest repetition, for the declared "
                                  "workload on the planned lots, on a log axis so that minutes and the window's hours both "
                                  "show; {marked}.", marked=marked), hour_rows))
    return blocks
