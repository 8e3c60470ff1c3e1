"""nri_plugin.value.Frozen behaves as the frozen dataclasses it stands in for: built by
position or keyword with defaults and factories, immutable, equal and hashed by type and
values, the dataclass repr, replace/fields/asdict, pickling."""

from __future__ import annotations

import pickle

import pytest

from nri_plugin.config.values import NodeConfig
from nri_plugin.plan.model import ContainerPlan, IoLimit
from nri_plugin.value import MISSING, Frozen, FrozenValueError, asdict, field, fields, replace


class Point(Frozen):
    x: int
    y: int = 0
    tags: tuple[str, ...] = field(default_factory=tuple, metadata={"doc": "labels"})


class Point3(Point):
    z: int = 0


def test_construction_by_position_keyword_default_and_factory():
    assert (Point(1).x, Point(1).y, Point(1).tags) == (1, 0, ())
    assert Point(1, 2) == Point(x=1, y=2) == Point(y=2, x=1)
    assert Point3(1, 2, (), 3).z == 3 and fields(Point3)[-1].name == "z"
    with pytest.raises(TypeError, match="missing required argument 'x'"):
        Point()
    with pytest.raises(TypeError, match="takes 3 positional arguments but 4"):
        Point(1, 2, (), 4)
    with pytest.raises(TypeError, match="unexpected or repeated argument 'w'"):
        Point(1, w=2)
    with pytest.raises(TypeError, match="unexpected or repeated argument 'x'"):
        Point(1, x=2)


def test_a_field_without_a_default_may_not_follow_one_with_a_default():
    with pytest.raises(TypeError, match="'b' without a default follows"):
        type("Bad", (Frozen,), {"__annotations__": {"a": "int", "b": "int"}, "a": 1})


def test_immutable_after_init():
    p = Point(1)
    with pytest.raises(FrozenValueError):
        p.x = 2  # type: ignore[misc]
    with pytest.raises(FrozenValueError):
        del p.y  # type: ignore[misc]
    with pytest.raises(AttributeError):  # slotted: no new attributes either
        object.__setattr__(p, "w", 1)
    assert isinstance(FrozenValueError("x"), AttributeError)  # as dataclasses' error is


def test_equality_and_hash_by_type_and_values():
    assert Point(1, 2) == Point(1, 2) and hash(Point(1, 2)) == hash(Point(1, 2))
    assert Point(1, 2) != Point(1, 3)
    assert Point3(1, 2) != Point(1, 2)  # another type is never equal
    assert len({Point(1), Point(1), Point(2)}) == 2
    with pytest.raises(TypeError):  # an unhashable value makes the value unhashable
        hash(ContainerPlan("hard", 2, placement_record={"cpus": "0"}))


def test_repr_is_the_dataclass_repr():
    assert repr(Point(1, 2)) == "Point(x=1, y=2, tags=())"


def test_replace_fields_asdict_pickle():
    p = Point(1, 2, ("a",))
    assert replace(p, y=5) == Point(1, 5, ("a",)) and p.y == 2
    with pytest.raises(TypeError):
        replace(p, w=1)
    assert [f.name for f in fields(p)] == ["x", "y", "tags"]
    assert fields(Point)[0].default is MISSING and fields(Point)[2].metadata == {"doc": "labels"}
    plan = ContainerPlan("hard", 2, io_max=(IoLimit(8, 0, read_bps=1),))
    assert asdict(plan)["io_max"] == (
        {
            "major": 8,
            "minor": 0,
            "read_bps": 1,
            "write_bps": None,
            "read_iops": None,
            "write_iops": None,
        },
    )
    config = NodeConfig(enforcement="soft")
    assert pickle.loads(pickle.dumps(config)) == config


def test_replace_still_serves_dataclasses():
    import dataclasses

    @dataclasses.dataclass(frozen=True)
    class Old:
        a: int
        b: str = "kept"
        derived: int = dataclasses.field(init=False, default=0)

    assert replace(Old(1, "x"), a=2) == dataclasses.replace(Old(1, "x"), a=2) == Old(2, "x")
    with pytest.raises(TypeError):
        replace(Old(1), derived=3)
    with pytest.raises(TypeError, match="frozen value or a dataclass"):
        replace(object(), a=1)


class Derived(Frozen):
    """compare=False, a __post_init__ and the class's own slots, as the topology's values
    use them."""

    __slots__ = ("_doubled",)

    x: int
    note: dict = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        if self.x < 0:
            raise ValueError("x must not be negative")
        object.__setattr__(self, "_doubled", 2 * self.x)


class DerivedMore(Derived):
    y: int = 0


def test_a_field_left_out_of_comparison_is_left_out_of_equality_and_hash_only():
    a, b = Derived(1, {"a": 1}), Derived(1, {"b": 2})
    assert a == b and hash(a) == hash(b) and a != Derived(2)
    assert repr(a) == "Derived(x=1, note={'a': 1})"  # still shown, as a dataclass shows it
    assert replace(a, x=3).note == {"a": 1} and fields(Derived)[1].compare is False


def test_post_init_runs_after_init_and_the_own_slots_hold_what_it_derives():
    d = Derived(4)
    assert d._doubled == 8 and [f.name for f in fields(d)] == ["x", "note"]
    with pytest.raises(ValueError, match="negative"):
        Derived(-1)
    with pytest.raises(FrozenValueError):
        d._doubled = 1  # type: ignore[misc]
    assert DerivedMore(2, y=1)._doubled == 4  # a subclass runs its base's __post_init__
    assert pickle.loads(pickle.dumps(d))._doubled == 8
