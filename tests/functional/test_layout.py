"""Functional core of ChannelsLast: ``lightning_efficient.functional.layout``."""

from __future__ import annotations

import copy
import dataclasses
from collections import OrderedDict, defaultdict, namedtuple

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from lightning_efficient.functional.layout import (
    LAYOUT_NOTE_PREFIX,
    BatchToChannelsLast,
    ConversionReport,
    batch_to_channels_last,
    check_five_d,
    convert_module_to_channels_last,
    is_channels_last,
    is_channels_last_3d,
    layout_error_note,
    parse_exclude,
    to_channels_last,
    to_nchw,
)

CL = torch.channels_last


class Zoo(nn.Module):
    """Every kind of layer the conversion must survive."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.depthwise = nn.Conv2d(8, 8, 3, padding=1, groups=8)  # weight [8, 1, 3, 3]: C == 1, ambiguous
        self.grouped = nn.Conv2d(8, 8, 1, groups=2)
        self.up = nn.ConvTranspose2d(8, 4, 2, stride=2)
        self.conv3d = nn.Conv3d(1, 2, 3, padding=1)
        self.conv1d = nn.Conv1d(4, 4, 3, padding=1)
        self.ln = nn.LayerNorm(4)
        self.gn = nn.GroupNorm(2, 4)
        self.emb = nn.Embedding(10, 4)
        self.head = nn.Linear(4, 5)
        self.act = nn.ReLU()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.drop = nn.Dropout(0.0)
        self.flat = nn.Flatten()
        self.pos = nn.Parameter(torch.randn(1, 8, 4, 4))  # custom 4-D parameter
        self.register_buffer("mask4d", torch.ones(1, 8, 4, 4))  # 4-D float buffer
        self.register_buffer("ids4d", torch.zeros(1, 8, 4, 4, dtype=torch.long))  # 4-D integer buffer

    def forward(self, x: torch.Tensor, tokens: torch.Tensor, vol: torch.Tensor) -> torch.Tensor:
        x = self.act(self.bn(self.conv(x)))
        x = self.grouped(self.depthwise(x)) + self.pos * self.mask4d
        x = self.gn(self.up(x))
        x = self.flat(self.pool(self.drop(x)))
        x = self.ln(x + self.emb(tokens))
        x = x + self.conv1d(x.unsqueeze(-1).expand(-1, -1, 3)).mean(-1) + self.conv3d(vol).mean((1, 2, 3, 4))[:, None]
        return self.head(x)


def _inputs(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return (
        torch.randn(2, 3, 4, 4, generator=g),
        torch.randint(0, 10, (2,), generator=g),
        torch.randn(2, 1, 3, 4, 4, generator=g),
    )


def _strides(model: nn.Module) -> dict[str, tuple[int, ...]]:
    return {n: t.stride() for n, t in [*model.named_parameters(), *model.named_buffers()]}


FOUR_D = ("conv.weight", "depthwise.weight", "grouped.weight", "up.weight", "pos", "mask4d")


# ------------------------------------------------------------------------------------------- is_channels_last


def test_is_channels_last_basic_and_errors():
    x = torch.randn(2, 3, 4, 5)
    assert not is_channels_last(x)
    assert is_channels_last(x.to(memory_format=CL))
    assert not is_channels_last(torch.randn(3, 4, 5))
    assert not is_channels_last(torch.randn(1, 2, 3, 4, 5))
    assert not is_channels_last(x.to(memory_format=CL)[:, :, :, ::2])  # not dense
    assert is_channels_last_3d(torch.randn(2, 3, 4, 5, 6).to(memory_format=torch.channels_last_3d))
    assert not is_channels_last_3d(torch.randn(2, 3, 4, 5, 6))
    with pytest.raises(TypeError, match="torch.Tensor"):
        is_channels_last([1, 2])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="torch.Tensor"):
        to_channels_last("x")  # type: ignore[arg-type]


@pytest.mark.parametrize("shape", [(2, 1, 4, 4), (2, 3, 1, 1), (1, 1, 5, 3)])
def test_ambiguous_shapes_decided_by_strides(shape):
    """C == 1 or H == W == 1: both orders are dense; the strides PyTorch propagates from decide."""
    nchw = torch.randn(shape)
    nhwc = nchw.to(memory_format=CL)
    assert nchw.is_contiguous(memory_format=CL) and nhwc.is_contiguous()  # PyTorch's check says both
    assert not is_channels_last(nchw)
    assert is_channels_last(nhwc)
    converted = to_channels_last(nchw)
    assert is_channels_last(converted) and torch.equal(converted, nchw)
    # Channels_last really propagates through a conv from the converted tensor.
    out = nn.functional.conv2d(converted, torch.randn(4, shape[1], 1, 1))
    assert is_channels_last(out)


def test_n111_counts_as_both():
    x = torch.randn(3, 1, 1, 1)
    assert is_channels_last(x) and x.is_contiguous()
    assert to_channels_last(x) is x


@st.composite
def _tensors(draw):
    shape = tuple(draw(st.integers(1, 4)) for _ in range(4))
    layout = draw(st.sampled_from(["nchw", "nhwc", "permuted", "sliced"]))
    x = torch.randn(shape, dtype=draw(st.sampled_from([torch.float32, torch.float64, torch.bfloat16])))
    if layout == "nhwc":
        x = x.to(memory_format=CL)
    elif layout == "permuted":
        x = x.permute(0, 1, 3, 2)
    elif layout == "sliced":
        x = x[:, :, ::2]
    return x


@settings(max_examples=80, deadline=None)
@given(_tensors())
def test_to_channels_last_keeps_values_and_agrees_with_pytorch(x):
    y = to_channels_last(x)
    assert torch.equal(y, x) and y.dtype == x.dtype and y.shape == x.shape
    assert is_channels_last(y)
    # PyTorch's own notion: .to(channels_last) returns the tensor itself iff it suggests channels_last.
    if x.shape[1:] != (1, 1, 1):
        assert is_channels_last(x) == (x.to(memory_format=CL) is x)
    assert (y is x) == is_channels_last(x)


@settings(max_examples=80, deadline=None)
@given(_tensors())
def test_to_nchw_undoes_to_channels_last_and_gives_the_contiguous_strides(x):
    y = to_nchw(to_channels_last(x))
    assert torch.equal(y, x) and y.dtype == x.dtype and y.shape == x.shape
    n, c, h, w = x.shape
    assert y.stride() == (c * h * w, h * w, w, 1) or x.numel() == 0
    assert to_nchw(y) is y  # already NCHW: no copy
    if x.shape[1:] != (1, 1, 1) and x.numel():
        assert not is_channels_last(y)


def test_to_nchw_restrides_an_ambiguous_depthwise_weight_that_contiguous_leaves_alone():
    w = torch.randn(8, 1, 3, 3).to(memory_format=CL)  # [C, 1, k, k]: dense in both orders
    assert is_channels_last(w) and w.contiguous() is w  # .contiguous() keeps the channels_last strides
    y = to_nchw(w)
    assert not is_channels_last(y) and y.stride() == (9, 9, 3, 1) and torch.equal(y, w)
    x = torch.randn(2, 8, 5, 5)
    out = nn.functional.conv2d(x, y, groups=8)  # propagates NCHW, not channels_last
    assert not is_channels_last(out)
    for bad in ("x", None):
        with pytest.raises(TypeError, match="to_nchw expects a torch.Tensor"):
            to_nchw(bad)  # type: ignore[arg-type]
    ints = torch.zeros(2, 3, 4, 4, dtype=torch.uint8).to(memory_format=CL)
    assert to_nchw(ints) is ints and to_nchw(torch.zeros(3, 4)).dim() == 2


# ------------------------------------------------------------------------------------------- model conversion


def test_convert_zoo_model():
    torch.manual_seed(0)
    model = Zoo()
    params_before = {n: p for n, p in model.named_parameters()}
    strides_before = _strides(model)
    x, tokens, vol = _inputs()
    expected = model(x, tokens, vol)

    report = convert_module_to_channels_last(model)

    assert isinstance(report, ConversionReport)
    assert set(report.converted) == set(FOUR_D)
    assert report.num_converted == len(FOUR_D)
    assert report.skipped_5d == ("conv3d.weight",)
    assert report.already == () and report.excluded_modules == ()
    for name in FOUR_D:
        assert is_channels_last(model.get_parameter(name) if "mask" not in name else model.get_buffer(name)), name
    after = _strides(model)
    for name, stride in strides_before.items():
        if name not in FOUR_D:
            assert after[name] == stride, name  # Linear, norms, embedding, Conv1d/3d, int buffers untouched
    # Same Parameter objects (optimizers keep working) and same values.
    assert all(p is params_before[n] for n, p in model.named_parameters())
    torch.testing.assert_close(model(x, tokens, vol), expected)


def test_convert_is_idempotent_and_survives_casts():
    model = Zoo()
    convert_module_to_channels_last(model)
    again = convert_module_to_channels_last(model)
    assert again.converted == () and set(again.already) == set(FOUR_D)
    model.to(torch.float64).to("cpu")  # dtype/device moves preserve strides
    assert all(is_channels_last(model.get_parameter(n)) for n in ("conv.weight", "depthwise.weight", "up.weight"))


def test_conv3d_policy_channels_last_3d():
    model = Zoo()
    report = convert_module_to_channels_last(model, five_d="channels_last_3d")
    assert "conv3d.weight" in report.converted and report.skipped_5d == ()
    assert is_channels_last_3d(model.conv3d.weight)
    x, tokens, vol = _inputs()
    assert torch.isfinite(model(x, tokens, vol)).all()


def test_module_to_crashes_where_we_do_not():
    """The reason this function exists: ``Module.to(memory_format=channels_last)`` fails on 5-D weights."""
    with pytest.raises(RuntimeError):
        Zoo().to(memory_format=CL)
    convert_module_to_channels_last(Zoo())


def test_exclude_by_name_and_type():
    model = nn.Sequential(
        OrderedDict(
            stem=nn.Conv2d(3, 4, 3),
            body=nn.Sequential(nn.Conv2d(4, 4, 3), nn.Conv2d(4, 4, 1)),
            head=nn.ConvTranspose2d(4, 2, 2),
        )
    )
    before = _strides(model)
    report = convert_module_to_channels_last(model, exclude=("body", nn.ConvTranspose2d))
    assert report.converted == ("stem.weight",)
    assert report.excluded_modules == ("body", "head")
    assert set(report.excluded_tensors) == {"body.0.weight", "body.1.weight", "head.weight"}
    assert is_channels_last(model.stem.weight)
    for name in report.excluded_tensors:
        assert model.get_parameter(name).stride() == before[name]
    # A single dotted name is accepted too.
    model2 = nn.Sequential(nn.Conv2d(3, 4, 3), nn.Sequential(nn.Conv2d(4, 4, 3)))
    assert convert_module_to_channels_last(model2, exclude="1.0").converted == ("0.weight",)


def test_shared_parameter_converted_once_and_exclusion_wins():
    a = nn.Conv2d(3, 3, 3)
    b = nn.Conv2d(3, 3, 3)
    b.weight = a.weight
    report = convert_module_to_channels_last(nn.ModuleDict({"a": a, "b": b}))
    assert [n.endswith("weight") for n in report.converted].count(True) == 1
    c = nn.Conv2d(3, 3, 3)
    d = nn.Conv2d(3, 3, 3)
    d.weight = c.weight
    report = convert_module_to_channels_last(nn.ModuleDict({"c": c, "d": d}), exclude="d")
    assert not is_channels_last(c.weight)
    assert "c.weight" not in report.converted


def test_existing_grad_follows():
    conv = nn.Conv2d(3, 4, 3)
    conv(torch.randn(1, 3, 5, 5)).sum().backward()
    grad = conv.weight.grad.clone()
    convert_module_to_channels_last(conv)
    assert is_channels_last(conv.weight.grad) and torch.equal(conv.weight.grad, grad)


def test_lazy_modules_are_left_alone():
    model = nn.Sequential(nn.LazyConv2d(4, 3), nn.Conv2d(4, 4, 1))
    report = convert_module_to_channels_last(model)
    assert report.converted == ("1.weight",)


def test_bad_arguments():
    model = nn.Sequential(nn.Conv2d(3, 4, 3))
    with pytest.raises(ValueError, match=r"match no submodule.*\['0'\]"):
        convert_module_to_channels_last(model, exclude="hed")
    with pytest.raises(ValueError, match="empty name"):
        convert_module_to_channels_last(model, exclude="")
    with pytest.raises(TypeError, match="module names"):
        convert_module_to_channels_last(model, exclude=(3,))
    with pytest.raises(TypeError, match="module names"):
        convert_module_to_channels_last(model, exclude=(torch.Tensor,))
    with pytest.raises(TypeError, match="iterable"):
        convert_module_to_channels_last(model, exclude=5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="five_d"):
        convert_module_to_channels_last(model, five_d="channels_last")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="nn.Module"):
        convert_module_to_channels_last(torch.randn(3))  # type: ignore[arg-type]


def test_report_summary():
    report = convert_module_to_channels_last(Zoo(), exclude="up")
    text = report.summary()
    assert "5 tensors converted" in text and "1 5-D skipped" in text and "['up']" in text


# ------------------------------------------------------------------------------------------- batch conversion

Pair = namedtuple("Pair", ["image", "label"])


@dataclasses.dataclass
class Sample:
    image: torch.Tensor
    label: torch.Tensor
    name: str = "x"


@dataclasses.dataclass(frozen=True)
class FrozenSample:
    image: torch.Tensor
    extra: list


def _img(n: int = 2, c: int = 3, dtype=torch.float32) -> torch.Tensor:
    return torch.randn(n, c, 4, 5).to(dtype)


def _check_tensor(out: torch.Tensor, inp: torch.Tensor) -> None:
    assert torch.equal(out, inp) and out.dtype == inp.dtype and out.shape == inp.shape
    if inp.dim() == 4 and inp.is_floating_point():
        assert is_channels_last(out)
    else:
        assert out is inp and out.stride() == inp.stride()


def test_batch_containers_keep_type_keys_order():
    img, half = _img(), _img(dtype=torch.bfloat16)
    mask = torch.zeros(2, 1, 4, 5, dtype=torch.uint8)
    label, vec, vol = torch.arange(2), torch.randn(2, 7), torch.randn(2, 1, 2, 4, 5)
    batch = {
        "z_image": img,
        "a_mask": mask,
        "label": label,
        "nested": [(half, vec), {"vol": vol, "pair": Pair(img, label)}],
        "sample": Sample(img, label, "name"),
        "frozen": FrozenSample(img, [half, 3]),
        "od": OrderedDict(b=img, a=label),
        "dd": defaultdict(list, {"k": img}),
        "meta": "text",
        "none": None,
    }
    out = batch_to_channels_last(batch)

    assert type(out) is dict and list(out) == list(batch)
    _check_tensor(out["z_image"], img)
    _check_tensor(out["a_mask"], mask)
    _check_tensor(out["label"], label)
    assert type(out["nested"]) is list and type(out["nested"][0]) is tuple
    _check_tensor(out["nested"][0][0], half)
    _check_tensor(out["nested"][0][1], vec)
    _check_tensor(out["nested"][1]["vol"], vol)
    pair = out["nested"][1]["pair"]
    assert type(pair) is Pair
    _check_tensor(pair.image, img)
    _check_tensor(pair.label, label)
    assert type(out["sample"]) is Sample and out["sample"].name == "name"
    _check_tensor(out["sample"].image, img)
    _check_tensor(out["sample"].label, label)
    assert type(out["frozen"]) is FrozenSample
    _check_tensor(out["frozen"].image, img)
    _check_tensor(out["frozen"].extra[0], half)
    assert out["frozen"].extra[1] == 3
    assert type(out["od"]) is OrderedDict and list(out["od"]) == ["b", "a"]
    _check_tensor(out["od"]["b"], img)
    assert type(out["dd"]) is defaultdict and out["dd"].default_factory is list
    _check_tensor(out["dd"]["k"], img)
    assert out["meta"] == "text" and out["none"] is None
    # The input batch is not modified.
    assert not is_channels_last(batch["z_image"]) and not is_channels_last(batch["sample"].image)


def test_batch_simple_forms():
    img = _img()
    _check_tensor(batch_to_channels_last(img), img)
    x, y = batch_to_channels_last((img, torch.arange(2)))
    _check_tensor(x, img)
    out = batch_to_channels_last([img, img])
    assert type(out) is list and all(is_channels_last(t) for t in out)
    already = img.to(memory_format=CL)
    assert batch_to_channels_last(already) is already
    assert batch_to_channels_last("not a batch") == "not a batch"


def test_parse_exclude_and_check_five_d():
    assert parse_exclude(None) == ((), ())
    assert parse_exclude("head") == (("head",), ())
    assert parse_exclude(nn.Conv1d) == ((), (nn.Conv1d,))
    assert parse_exclude(["a", nn.Linear, "b.c"]) == (("a", "b.c"), (nn.Linear,))
    with pytest.raises(ValueError, match="empty name"):
        parse_exclude("")
    with pytest.raises(TypeError, match="module names"):
        parse_exclude((torch.Tensor,))
    with pytest.raises(TypeError, match="iterable"):
        parse_exclude(5)  # type: ignore[arg-type]
    assert check_five_d("skip") == "skip" and check_five_d("channels_last_3d") == "channels_last_3d"
    with pytest.raises(ValueError, match="five_d"):
        check_five_d("3d")


def test_converter_counts_over_calls_and_equals_the_function():
    convert = BatchToChannelsLast()
    img = _img()
    frozen = FrozenSample(image=img, extra=["meta"])
    first = convert({"a": img, "b": img.to(memory_format=CL), "y": torch.arange(2), "s": frozen})
    assert (convert.batches, convert.converted, convert.already) == (1, 2, 1)  # a, s.image converted; b already
    assert is_channels_last(first["a"]) and is_channels_last(first["s"].image) and first["y"].stride() == (1,)
    second = convert((img, "text"))
    assert (convert.batches, convert.converted, convert.already) == (2, 3, 1)
    torch.testing.assert_close(second[0], batch_to_channels_last((img, "text"))[0])
    assert second[1] == "text"


def test_batch_keeps_autograd():
    x = _img().requires_grad_()
    y = batch_to_channels_last(x)
    (y * 2).sum().backward()
    assert torch.equal(x.grad, torch.full_like(x, 2.0))


@settings(max_examples=60, deadline=None)
@given(
    shapes=st.lists(st.tuples(*[st.integers(0, 4)] * 4), min_size=1, max_size=4),
    dtype=st.sampled_from([torch.float32, torch.float16, torch.bfloat16, torch.float64]),
    rank=st.integers(1, 5),
)
def test_batch_values_unchanged_property(shapes, dtype, rank):
    tensors = [torch.randn(s).to(dtype) for s in shapes]
    others = [torch.randn((2,) * rank).to(dtype), torch.randint(0, 9, shapes[0])]
    batch = {"imgs": tensors, "others": tuple(others)}
    out = batch_to_channels_last(batch)
    for o, i in zip(out["imgs"], tensors, strict=False):
        _check_tensor(o, i)
    for o, i in zip(out["others"], others, strict=False):
        _check_tensor(o, i)


def test_optimizer_created_before_conversion_keeps_working():
    """In-place conversion: an optimizer (with momentum state) built earlier updates the converted parameters."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.Flatten(), nn.LazyLinear(2))
    x = torch.randn(2, 3, 6, 6)
    model(x)  # materialize the lazy layer
    reference = copy.deepcopy(model)
    optimizers = [torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in (model, reference)]
    for step in range(3):
        if step == 1:
            convert_module_to_channels_last(model)
        for m, opt in zip((model, reference), optimizers, strict=False):
            opt.zero_grad()
            m(x).square().mean().backward()
            opt.step()
    assert is_channels_last(model[0].weight)
    for p, q in zip(model.parameters(), reference.parameters(), strict=False):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------- errors of NCHW-only code on channels_last tensors


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape", [(2, 8, 8, 8), (4, 3, 5, 7), (1, 16, 2, 3)])
def test_view_error_gets_a_note_and_the_suggested_fixes_give_the_nchw_values(shape, dtype):
    nchw = torch.randn(shape).to(dtype)
    nhwc = nchw.to(memory_format=CL)
    with pytest.raises(RuntimeError) as info:
        nhwc.view(nhwc.size(0), -1)
    note = layout_error_note(info.value)
    assert note is not None and note.startswith(LAYOUT_NOTE_PREFIX)
    assert "ChannelsLast" in note and "torch.flatten(h, 1)" in note and "h.reshape(h.size(0), -1)" in note
    expected = nchw.view(nchw.size(0), -1)
    for fixed in (torch.flatten(nhwc, 1), nhwc.reshape(nhwc.size(0), -1), nn.Flatten()(nhwc)):
        assert fixed.shape == expected.shape and fixed.dtype == dtype
        assert torch.equal(fixed, expected)


@pytest.mark.parametrize(
    "error",
    [
        RuntimeError("my_op: input must be contiguous"),
        ValueError("Tensor is not contiguous"),
        RuntimeError("expected contiguous tensor, got strides (192, 1, 24, 3)"),
        AssertionError("cannot run on a non-contiguous input"),
    ],
    ids=repr,
)
def test_contiguity_errors_get_a_note_about_contiguous(error):
    note = layout_error_note(error)
    assert note is not None and "ChannelsLast" in note and ".contiguous()" in note


@pytest.mark.parametrize(
    "error",
    [RuntimeError("CUDA out of memory"), ValueError("boom"), KeyError("image"), RuntimeError("")],
    ids=repr,
)
def test_other_errors_get_no_note(error):
    assert layout_error_note(error) is None
