"""The build summary leads with each pipeline's key metric, chosen from the eval stage's task."""

from types import SimpleNamespace as NS

from ascendpipe.engine.progress import headline


def pipeline(**stages):
    return NS(stages={name: NS(kind=kind, params=params) for name, (kind, params) in stages.items()})


def test_eval_stages_come_first_leading_with_their_key_metric():
    p = pipeline(compare=("compare", {}), eval_golden=("eval", {"task": "classification"}),
                 eval=("eval", {"task": "classification"}), reid=("eval", {"task": "reid"}))
    outcomes = {
        "compare": NS(metrics={"output_cosine": 0.999999, "failed_ops": 0}),
        "eval_golden": NS(metrics={"top5": 1.0, "top1": 0.91}),
        "eval": NS(metrics={"delta_top5": 0.0, "top5": 1.0, "delta_top1": -0.01, "top1": 0.9}),
        "reid": NS(metrics={"rank1": 0.9, "mAP": 0.6}),
    }
    lines = headline(p, outcomes, ["compare", "eval_golden", "eval", "reid"]).splitlines()
    assert lines[0] == "metrics (key: top1, mAP):"
    assert [line.split()[0] for line in lines[1:]] == ["eval_golden", "eval", "reid", "compare"]
    assert lines[2].split()[1:3] == ["top1=0.9", "delta_top1=-0.01"]
    assert lines[3].split()[1] == "mAP=0.6"


def test_without_an_eval_the_summary_is_as_before():
    p = pipeline(compare=("compare", {}))
    text = headline(p, {"compare": NS(metrics={"output_cosine": 1.0})}, ["compare"])
    assert text == "metrics:\n  compare                      output_cosine=1\n"


def test_a_compare_whose_outputs_pass_says_so_before_its_contained_count():
    p = pipeline(compare=("compare", {}), failing=("compare", {}))
    metrics = {"failed_ops": 7, "contained_ops": 7, "output_cosine": 0.999996}
    outcomes = {"compare": NS(metrics=dict(metrics)), "failing": NS(metrics=dict(metrics))}
    infos = {"compare": {"first_failure": None,
                         "verdict": "every output passes; 7 ops beyond thresholds contained (listed apart)"},
             "failing": {"first_failure": None,
                         "verdict": "outputs fail, but no compared op before them fails the thresholds"}}
    lines = headline(p, outcomes, ["compare", "failing"], infos=infos).splitlines()
    assert lines[1].split()[1:4] == ["outputs", "pass", "(7"]
    assert "outputs pass" not in lines[2]  # a failing output is never called a pass


def test_a_stage_that_ran_and_the_same_stage_read_back_print_the_same_line():
    """Metrics as the kind returned them (a build that ran it) and as the database gives them back
    (sorted: a no-op) are one line, so two builds' summaries can be compared by eye or by diff."""
    p = pipeline(compare=("compare", {}))
    ran = {"failed_ops": 0, "min_cosine": 1.0, "output_cosine": 1.0, "overflow_ops": 0, "dump_bytes": 1781324}
    read_back = dict(sorted(ran.items()))
    assert list(ran) != list(read_back)
    as_ran = headline(p, {"compare": NS(metrics=ran)}, ["compare"])
    assert as_ran == headline(p, {"compare": NS(metrics=read_back)}, ["compare"])
    assert as_ran.splitlines()[1].split()[1:] == ["dump_bytes=1781324", "failed_ops=0", "min_cosine=1",
                                                   "output_cosine=1", "overflow_ops=0"]
