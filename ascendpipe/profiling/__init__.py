"""Pure profiling helpers shared by both backends: latency statistics, msprof-style CSVs,
Chrome-trace timelines and the HTML report. No onnxruntime here."""
