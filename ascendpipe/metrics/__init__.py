"""Accuracy metrics on model outputs, callable directly: ``from ascendpipe.metrics import topk_accuracy``.

Pure numpy in float64; no onnx/torch imports. Fractions are in [0, 1].
"""

from ascendpipe.metrics.classification import topk_accuracy
from ascendpipe.metrics.detect_post import detections
from ascendpipe.metrics.detection import detection_map
from ascendpipe.metrics.lm import label_accuracy, next_token_agreement, perplexity
from ascendpipe.metrics.nms import nms
from ascendpipe.metrics.reid import reid_map_cmc

__all__ = ["topk_accuracy", "reid_map_cmc", "detection_map", "detections", "nms", "next_token_agreement", "perplexity",
           "label_accuracy"]
