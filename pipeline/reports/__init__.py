"""Throughput reports: what the fleet did in a period and what it cost.

compute.py reads the jobs, batches and job_metrics tables into a Report (model.py); render_md.py,
render_html.py (+ plots.py) and render_json.py turn one into text; publish.py stores one and records
it in the reports table. Definitions (busy time, percentiles, reasons) are in stats.py.
"""
