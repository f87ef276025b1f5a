"""Built-in data steps (pure numpy): letterbox and resize preprocessing for detectors."""
