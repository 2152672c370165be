"""Paired, per-seed comparison of finished runs against a baseline method.

Reads result files of ``python -m pyg_progcl train --output`` and of
``benchmarks/reproduce.py`` (whose cells ran seeds ``0..n-1``), merges runs of
the same setting (dataset, method, epochs, warm-up) over the union of their
seeds, and prints a markdown table: mean ± std per setting and, against the
baseline method at the same dataset and epochs, the mean per-seed difference on
the seeds both ran and on how many of them the method did better. Seed ``s``
fixes the evaluation split of both runs, so the per-seed difference removes the
split-to-split spread that dominates a 5-seed standard deviation. A run whose file
has a ``variant`` field (an experiment outside the presets), or whose config names a fit
schedule other than the default (``'floored'``), mixture options (``min_beta_high``,
``mixture_weight_init``) or ``shared_weights``, is a setting of its own. A ProGCL run's
config must name its schedule, and no config may have fields this version's
:class:`~pyg_progcl.cli.presets.TrainConfig` lacks (files of other versions are
refused). Runs of one row
must share every other config field except :data:`NOT_A_SETTING` (else an error names
the fields), and a row is paired with the baseline only where both were evaluated alike
(:data:`EVALUATION`).

Example::

    python benchmarks/compare.py runs/cora400_seeds5-9_*.json runs/reproduce_cora_400.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # run from a checkout without installing

from pyg_progcl.cli.evaluation import mean_std  # noqa: E402
from pyg_progcl.cli.presets import TrainConfig  # noqa: E402
from pyg_progcl.losses.schedules import DEFAULT_SCHEDULE  # noqa: E402

#: How a run's label names a ProGCL fit schedule other than the default
#: (:data:`~pyg_progcl.losses.schedules.DEFAULT_SCHEDULE`).
SCHEDULE_LABELS = {
    "online": "schedule 'online'",
    "floored": "schedule 'floored'",
    "frozen": "reference schedule: frozen per-pair weights",
}


#: Mixture options that make a run a setting of its own, and how its label names them.
MIXTURE_LABELS = {"min_beta_high": "β ≥ {:g}", "mixture_weight_init": "initial w = {:g}"}
#: Loss options that make a run a setting of its own (when not at their default).
OPTION_LABELS = {"floor": "p(TN) ≥ {:g}"}


#: How a run's label names the frozen schedule with ``shared_weights`` (the reference code).
SHARED_LABEL = "reference schedule: the first direction's frozen weights for both"


def _config(run: dict) -> dict:
    """The run's config; a ``ValueError`` for fields :class:`TrainConfig` lacks, or a ProGCL
    run that does not name its schedule (a file of another version)."""
    config = run["config"]
    unknown = sorted(set(config) - set(TrainConfig.defaults()))
    if unknown:
        raise ValueError(f"unknown config fields {unknown}: a file of another version")
    if run["method"].startswith("progcl") and "schedule" not in config:
        raise ValueError("a ProGCL run without a `schedule` field: a file of another version")
    return config


def _schedule(run: dict) -> str | None:
    """The ProGCL fit schedule the run trained with (``None`` for other methods, whose
    configs carry the field unused)."""
    return _config(run)["schedule"] if run["method"].startswith("progcl") else None


def _label(run: dict) -> str:
    """``method``, or ``method (variant)`` for a variant, a non-default fit schedule or
    non-default mixture options (joined by ``, ``)."""
    config = _config(run)
    schedule = SHARED_LABEL if config.get("shared_weights") else None
    named = _schedule(run)
    if named not in (None, DEFAULT_SCHEDULE):
        schedule = schedule or SCHEDULE_LABELS.get(named)
    parts = [run.get("variant") or schedule]
    parts += [f.format(config[k]) for k, f in MIXTURE_LABELS.items() if config.get(k) is not None]
    parts += [f.format(config[k]) for k, f in OPTION_LABELS.items() if config.get(k)]
    parts = [p for p in parts if p]
    return run["method"] + (f" ({', '.join(parts)})" if parts else "")


#: Config fields that do not change a run's result: merged runs may differ in them.
NOT_A_SETTING = ("eval_every", "diagnose_every", "block_size")

#: Fields a run and its baseline must share to be paired (the same evaluation).
EVALUATION = ("protocol", "split", "probe_epochs")


def _setting(run: dict) -> dict:
    """The run's config with defaults for fields older files lack, its schedule as
    :func:`_schedule` reads it, less :data:`NOT_A_SETTING`."""
    full = {**TrainConfig.defaults(), **_config(run), "schedule": _schedule(run)}
    return {k: v for k, v in full.items() if k not in NOT_A_SETTING}


def check_settings(runs: list[dict]) -> dict[tuple, dict]:
    """Each row's setting; raises ``ValueError`` if two runs of one row differ in one."""
    settings: dict[tuple, dict] = {}
    for run in runs:
        first = settings.setdefault(run["key"], run["setting"])
        differ = sorted(k for k in first.keys() | run["setting"].keys()
                        if first.get(k) != run["setting"].get(k))  # fmt: skip
        if differ:
            values = ", ".join(f"{k} {first.get(k)!r} vs {run['setting'].get(k)!r}" for k in differ)
            raise ValueError(
                f"{run['key']}: runs of one row differ in {values} ({run['file']}); give the "
                "file a `variant` field or leave it out"
            )
    return settings


def load_runs(path: Path) -> list[dict]:
    """The runs of one result file, each with its ``{seed: accuracy}``; a ``ValueError``
    naming the file for a run :func:`_config` refuses."""
    data = json.loads(path.read_text())
    if "cells" in data:  # benchmarks/reproduce.py: seeds 0..n-1
        runs = [dict(c, seeds=list(range(c["seeds"]))) for c in data["cells"]]
    else:
        runs = [data]
    for run in runs:
        try:
            _config(run)
        except ValueError as exc:
            raise ValueError(f"{path}: {exc}") from None
    return [
        {
            "key": (
                r["dataset"],
                _label(r),
                r["config"]["epochs"],
                r["config"]["warmup_epochs"] if r["method"].startswith("progcl") else None,
            ),
            "acc": dict(zip(r["seeds"], r["accuracies"])),
            "setting": _setting(r),
            "file": str(path),
        }
        for r in runs
    ]


def merge(runs: list[dict]) -> dict[tuple, dict[int, float]]:
    """Union of seeds per setting; a seed run twice should agree (else a note, the first kept)."""
    merged: dict[tuple, dict[int, float]] = {}
    for run in runs:
        into = merged.setdefault(run["key"], {})
        for seed, acc in run["acc"].items():
            if seed in into and abs(into[seed] - acc) > 1e-9:
                print(
                    f"note: {run['key']} seed {seed}: {into[seed]:.4f} vs {acc:.4f}, keeping the first"
                )
            into.setdefault(seed, acc)
    return merged


def _seeds(seeds: list[int]) -> str:
    """``[0, 1, 2, 3, 10, 11]`` -> ``'0–3, 10, 11'``."""
    runs: list[list[int]] = []
    for seed in seeds:
        if runs and seed == runs[-1][-1] + 1:
            runs[-1].append(seed)
        else:
            runs.append([seed])
    return ", ".join(f"{r[0]}–{r[-1]}" if len(r) > 2 else ", ".join(map(str, r)) for r in runs)


def table(
    merged: dict[tuple, dict[int, float]], baseline: str, settings: dict[tuple, dict] | None = None
) -> str:
    """Markdown: one row per setting, with its mean per-seed Δ against ``baseline`` (with
    ``settings``, only where both share the evaluation: :data:`EVALUATION`)."""
    lines = [
        f"| dataset | method | epochs | warm-up | seeds | accuracy (%) | vs {baseline}: mean Δ (better / paired seeds) | per-seed Δ |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for key in sorted(merged, key=lambda k: (k[0], k[2], k[1] != baseline, k[1], k[3] or 0)):
        dataset, method, epochs, warmup = key
        acc = merged[key]
        seeds = sorted(acc)
        mean, std = mean_std(acc[s] for s in seeds)
        base_key = (dataset, baseline, epochs, None)
        base = merged.get(base_key, {})
        if settings and base and not _same_evaluation(settings[key], settings[base_key]):
            print(f"note: {key} is evaluated unlike {base_key}; not paired")
            base = {}
        paired = [s for s in seeds if s in base]
        versus, per_seed = "", ""
        if method != baseline and paired:
            deltas = [100 * (acc[s] - base[s]) for s in paired]
            wins = sum(d > 0 for d in deltas)
            versus = f"{sum(deltas) / len(deltas):+.2f} ({wins} / {len(deltas)})"
            per_seed = ", ".join(f"{d:+.2f}" for d in deltas)
        lines.append(
            f"| {dataset} | {method} | {epochs} | {'' if warmup is None else warmup} "
            f"| {_seeds(seeds)} | {100 * mean:.2f} ± {100 * std:.2f} | {versus} | {per_seed} |"
        )
    return "\n".join(lines)


def _same_evaluation(a: dict, b: dict) -> bool:
    return all(a.get(k) == b.get(k) for k in EVALUATION)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+", type=Path, help="result JSON files")
    parser.add_argument(
        "--baseline",
        default="grace",
        help="method to pair against (one without a warm-up: grace, gca, dcl, hcl)",
    )
    args = parser.parse_args(argv)
    if args.baseline.startswith("progcl"):
        parser.error("--baseline must be a method without a warm-up (grace, gca, dcl, hcl)")
    try:
        runs = [run for path in args.files for run in load_runs(path)]
        settings = check_settings(runs)
    except ValueError as exc:
        parser.error(str(exc))
    print(table(merge(runs), args.baseline, settings))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
