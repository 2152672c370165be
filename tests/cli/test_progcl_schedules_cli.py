"""ProGCL's fit schedules as the presets and the trainer build them."""

from __future__ import annotations

import warnings

import pytest
from helpers import fits_that_find

from pyg_progcl import BetaMixture, MixtureDegeneracyWarning
from pyg_progcl.cli.build import build_loss
from pyg_progcl.cli.presets import get_preset
from pyg_progcl.losses import FlooredFit, FrozenFit, OnlineFit, ProGCLLoss
from pyg_progcl.losses.schedules import SCHEDULES, FitSchedule, as_schedule, schedule_name


def test_floored_is_a_named_schedule():
    loss = ProGCLLoss(0.5, schedule="floored")
    assert "FlooredFit()" in repr(loss) and loss.schedule.floor == 0.5
    assert schedule_name(loss.schedule) == "floored"
    config = get_preset("synthetic", "progcl-weight", schedule="floored")
    assert schedule_name(build_loss(config).schedule) == "floored"
    with pytest.raises(ValueError, match="floor"):
        FlooredFit(floor=1.5)


def test_schedules_are_named_by_their_name_whatever_their_options():
    for name in SCHEDULES:
        assert as_schedule(name).name == name and as_schedule(name, floor=0.7).name == name
    named = {
        "floored": FlooredFit(floor=0.7),  # (its repr differs from the registry's)
        "online": OnlineFit(floor=0.5),
        "frozen": FrozenFit(shared_weights=True, floor=0.2),
    }
    for name, schedule in named.items():
        assert schedule_name(schedule) == name
    config = get_preset("synthetic", "progcl-weight", schedule="online", floor=0.3)
    assert schedule_name(build_loss(config).schedule) == "online"
    assert build_loss(config).schedule.floor == 0.3

    class Weekly(FitSchedule):
        pass

    assert schedule_name(Weekly()) == "Weekly"
    assert "floor=0.7" in repr(FlooredFit(floor=0.7)) and repr(OnlineFit()) == "OnlineFit()"


FLOOR_VALUES = [
    ("weight", OnlineFit(floor=0.5), False,
     [2.42475317518999, 0.10460700732708712, 0.9582557498760673, -0.0038804365681591193]),
    ("weight", FlooredFit(), True,
     [2.42475317518999, 0.10460700732708712, 0.9582557498760673, -0.0038804365681591193]),
    ("weight", FlooredFit(floor=0.7), True,
     [2.5299203807605353, 0.10344856960186075, 0.9614177364062558, -0.005158234067219084]),
    ("weight", OnlineFit(floor=0.3), False,
     [2.2694596146022716, 0.10683898553042595, 0.9522084254655604, -0.0011707296003284511]),
    ("mix", FlooredFit(), True,
     [2.447606673281429, 0.0937187769525691, 0.9683388892341084, -0.003107370209901932]),
    ("mix", OnlineFit(floor=0.7), False,
     [2.5494913195111497, 0.09287921737964105, 0.9846865857692184, -0.005411436811285359]),
    ("mix", FrozenFit(floor=0.5), False,
     [2.4039501992346475, 0.10570286563098294, 0.9598355188077845, -0.0038486564862606877]),
]  # fmt: skip


def test_bad_schedule_is_a_clear_error():
    assert set(SCHEDULES) == {"online", "floored", "frozen"}
    for name in ("sometimes", "guarded", "fit-once"):
        with pytest.raises(ValueError, match=r"`schedule` must be one of .*got '"):
            ProGCLLoss(0.5, schedule=name)
    with pytest.raises(ValueError, match="schedule"):
        get_preset("synthetic", "progcl-weight", schedule="weekly")
    with pytest.raises(ValueError, match=r"schedule='frozen'.*batch_size"):
        get_preset("synthetic", "progcl-weight", schedule="frozen", batch_size=64)
    config = get_preset("synthetic", "progcl-weight", schedule="frozen")
    assert isinstance(build_loss(config).schedule, FrozenFit)


@pytest.mark.parametrize("schedule", ["floored", "online"])
def test_the_trainer_records_every_degenerate_epoch_and_warns_only_without_a_floor(
    monkeypatch, schedule
):
    from pyg_progcl.cli import get_preset, train_seed
    from pyg_progcl.datasets import synthetic_graph

    monkeypatch.setattr(BetaMixture, "fit", fits_that_find(lambda: ["x"], text="test"))
    config = get_preset(
        "synthetic", "progcl-weight", epochs=6, warmup_epochs=2, probe_epochs=20, schedule=schedule
    )
    data = synthetic_graph(num_nodes=120)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _, _, record = train_seed(config, data, seed=0, progress=False)
    warned = [w for w in caught if w.category is MixtureDegeneracyWarning]
    if schedule == "floored":
        assert warned == []  # the floor handles it
    else:
        (warning,) = warned  # once per run, not once per epoch
        assert warning.filename == __file__  # the caller's line, not the package's
        assert "schedule 'online' has no floor" in str(warning.message)
    assert [e["epoch"] for e in record["degenerate_fits"]] == [3, 4, 5, 6]
    floor = 0.5 if schedule == "floored" else 0.0
    assert record["degenerate_fits"][0] == {"epoch": 3, "problems": ["test"], "floor": floor}
