"""``advcli report``: one self-contained HTML page to look at a log's groups, rewards and
advantages.

:mod:`~advcli.reports.collect` gathers the numbers in streaming passes (the audit's, and the
method's final pass when one is given, read by :mod:`~advcli.reports.rollout_pass`);
:mod:`~advcli.reports.page` draws them into one HTML file with everything inline (the charts
need the optional extra ``advcli[report]``: Bokeh); :mod:`~advcli.reports.options` declares
what it keeps.
"""

from advcli.reports.options import ReportOptions

__all__ = ["ReportOptions"]
