"""The experiment explorer: one HTML page over every recorded run, ``checkout`` of a run's settings
and outputs, and the export of runs to MLflow.

- ``shape``: pure, run records -> the page's model; ``variants`` (pure): its variants tables, one per
  pipeline; ``values`` (pure, a leaf): what both read from run records;
- ``collect``: reads records and compare results (from the cache) for it;
- ``page``: renders the page (Jinja2, ``report/templates/runs.html.j2`` and its script ``runs.js``);
- ``checkout``: the overrides that give a run's params back, and the restore of its outputs;
- ``mlflow_export``: runs as MLflow runs (``mlflow`` is an optional extra).
"""
