"""The words a verdict is written in, apart from the statistics that reach one (geofact.evidence).

The theory pages record verdicts through geofact.pages.report and never test an interval; keeping these
names in a module of their own keeps those pages from depending on the statistics, so that a change to
how an interval is judged does not call for re-executing pages it cannot change (`geofact check` marks a
page stale when any module it imported changed).
"""

HOLDS, FAILS, INCONCLUSIVE = "holds", "does not hold", "inconclusive"
NOT_IN_REGIME = "not in regime"  # what geofact.training.regime records where the runs are outside the paper's regime
NOT_RUN = "not run"  # a claim the page could not test on this machine (e.g. no language model loads)
