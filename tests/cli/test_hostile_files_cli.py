"""Graph and model files against hostile input through the command line: forged or
damaged files are refused in one line, and signals leave true messages and no stray
temporary files (docs/own_graph.md)."""

from __future__ import annotations

import io
import os
import re
import signal
import struct
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import REPO, one_line_error, run_main
from torch_geometric.data import Data

from pyg_progcl import EdgeDrop, FeatureMask, GCNEncoder, GRACEModel
from pyg_progcl.io import load_model, read_graph, save_model

TESTS = Path(__file__).resolve().parent


def graph(n=120, f=10, seed=0) -> Data:
    g = torch.Generator().manual_seed(seed)
    return Data(
        x=torch.randn(n, f, generator=g), edge_index=torch.randint(0, n, (2, 4 * n), generator=g)
    )


def npy_bytes(array, allow_pickle=False) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=allow_pickle)
    return buffer.getvalue()


def write_zip(path, members: dict[str, bytes], method=zipfile.ZIP_STORED):
    with zipfile.ZipFile(path, "w", compression=method) as archive:
        for name, content in members.items():
            archive.writestr(name, content)
    return path


def listing(folder) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def _forged_npz(tmp_path) -> dict[str, tuple]:
    """``name -> (path, message)`` of ``.npz`` files that are not plain arrays."""
    data = graph(n=20)
    x, edge_index = npy_bytes(data.x.numpy()), npy_bytes(data.edge_index.numpy())
    huge = io.BytesIO()  # a header declaring 10^12 x 1000 float32 (4 PB), then 64 bytes
    np.lib.format.write_array_header_1_0(
        huge, {"descr": "<f4", "fortran_order": False, "shape": (10**12, 1000)}
    )
    huge.write(bytes(64))
    renamed = tmp_path / "renamed.npz"
    renamed.write_bytes(x)
    cases = {
        "pickled-objects": (
            write_zip(tmp_path / "o.npz", {"x.npy": npy_bytes(np.array([1, "a"], dtype=object), True),
                                           "edge_index.npy": edge_index}),  # fmt: skip
            "array 'x' holds Python objects",
        ),
        "text-member": (
            write_zip(tmp_path / "t.npz", {"x.npy": x, "edge_index.npy": edge_index, "y": b"0 1 2"}),
            "member 'y' is not a NumPy array",
        ),
        "npy-renamed": (renamed, "it is a NumPy .npy file (one array), not a .npz archive"),
        "forged-header": (
            write_zip(tmp_path / "h.npz", {"x.npy": huge.getvalue(), "edge_index.npy": edge_index}),
            "array 'x' declares shape [1000000000000, 1000] of float32",
        ),
        "forged-directory": (_forged_directory(tmp_path / "d.npz", edge_index), "more than its compression"),
    }  # fmt: skip
    return cases


def _forged_directory(path, edge_index: bytes):
    """A stored member whose header declares 10^9 float32 (4 GB) and whose zip entries
    claim that many bytes, while it holds 64."""
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": "<f4", "fortran_order": False, "shape": (10**9,)}
    )
    content = header.getvalue() + bytes(64)
    write_zip(path, {"x.npy": content, "edge_index.npy": edge_index})
    raw = bytearray(path.read_bytes())
    claimed = struct.pack("<I", len(header.getvalue()) + 4 * 10**9)
    for signature, offset in ((b"PK\x03\x04", 22), (b"PK\x01\x02", 24)):  # local, central
        at = raw.index(signature)  # (x.npy is the first member)
        raw[at + offset : at + offset + 4] = claimed
    path.write_bytes(bytes(raw))
    return path


def test_npz_files_that_are_not_plain_arrays_are_one_line(tmp_path, capsys):
    """Before: a text member and an .npy renamed to .npz raised AttributeError / TypeError,
    a header declaring 10^12 x 1000 floats tried to allocate 3.55 PiB (MemoryError)."""
    model = save_model(GRACEModel(GCNEncoder(10, 8), 8, 8), tmp_path / "m.pt")
    out = tmp_path / "out"
    out.mkdir()
    for name, (path, message) in _forged_npz(tmp_path).items():
        tic = time.perf_counter()
        with pytest.raises(ValueError) as info:
            read_graph(path)
        assert message in str(info.value) and path.name in str(info.value), (name, info.value)
        assert time.perf_counter() - tic < 5, name  # refused from the header, not read
        argv = ["embed", "--model", model, "--data", path, "--output", out / "z.npy"]
        one_line_error(*run_main(capsys, *map(str, argv))[::2], message)
    assert listing(out) == []
    data = graph(n=20)  # arrays in the other byte order are plain arrays too
    big_endian = tmp_path / "be.npz"
    np.savez(
        big_endian, x=data.x.numpy().astype(">f8"), edge_index=data.edge_index.numpy().astype(">i8")
    )
    got = read_graph(big_endian)
    assert torch.equal(got.x, data.x) and torch.equal(got.edge_index, data.edge_index)


def test_a_compressed_npz_of_another_width_is_refused_from_its_header(
    tmp_path, capsys, monkeypatch
):
    """Before: ``embed`` decompressed a deflated ``x`` of the wrong width whole (1.6 GB,
    56 s) before refusing it; now the member's header shows the width. Counted by the
    arrays read."""
    model = save_model(GRACEModel(GCNEncoder(10, 8), 8, 8), tmp_path / "m.pt")
    g = graph(n=50, f=12)
    path = tmp_path / "wide.npz"
    np.savez_compressed(path, x=g.x.numpy(), edge_index=g.edge_index.numpy())
    read, real = [], np.lib.format.read_array
    monkeypatch.setattr(
        np.lib.format, "read_array", lambda *a, **k: read.append(1) or real(*a, **k)
    )
    message = "the graph's features have width 12, the model expects 10 (its in_channels)"
    argv = ["embed", "--model", model, "--data", path, "--output", tmp_path / "z.npy"]
    one_line_error(*run_main(capsys, *map(str, argv))[::2], message, "wide.npz")
    assert read == [] and listing(tmp_path) == ["m.pt", "wide.npz"]
    with pytest.raises(ValueError, match=re.escape(message)):
        read_graph(path, num_features=10)
    assert read == []
    assert read_graph(path, num_features=12).x.shape == (50, 12)


def _resealed(payload: dict) -> dict:
    """``payload`` sealed again after an edit, as a forger would (where files are sealed)."""
    if "checksum" in payload:
        from pyg_progcl.io.files import payload_checksum

        payload["checksum"] = payload_checksum(payload)
    return payload


def _flip_tensor_bytes(path, count=64, seed=0) -> None:
    """Flips ``count`` bytes inside the weights' data records of torch file ``path`` (torch
    does not check their CRC, so the file still loads)."""
    with zipfile.ZipFile(path) as archive:
        records = [i for i in archive.infolist() if "/data/" in i.filename and i.file_size >= 256]
    raw = bytearray(path.read_bytes())
    info = max(records, key=lambda i: i.file_size)
    name_len, extra_len = struct.unpack(
        "<HH", raw[info.header_offset + 26 : info.header_offset + 30]
    )
    start = info.header_offset + 30 + name_len + extra_len
    rng = np.random.default_rng(seed)
    for i in rng.choice(info.file_size, count, replace=False):
        raw[start + int(i)] ^= 0xFF
    path.write_bytes(bytes(raw))


def _forged_models(tmp_path) -> dict[str, tuple]:
    torch.manual_seed(0)
    good = save_model(GRACEModel(GCNEncoder(10, 8), 8, 8), tmp_path / "good.pt")
    flipped = tmp_path / "flipped.pt"
    flipped.write_bytes(good.read_bytes())
    _flip_tensor_bytes(flipped)
    payload = torch.load(good, weights_only=True)
    next(iter(payload["state_dict"].values())).view(-1)[0] = float("nan")
    torch.save(_resealed(payload), tmp_path / "nan.pt")
    cases = {
        "flipped": (flipped, "does not match its checksum"),
        "nan": (tmp_path / "nan.pt", "holds NaN or infinite values"),
    }
    for conv in ("Sequential", "DataParallel"):
        payload = torch.load(good, weights_only=True)
        payload["config"]["encoder"]["conv"] = conv
        path = tmp_path / f"{conv}.pt"
        torch.save(_resealed(payload), path)
        cases[conv] = (path, f"{conv!r} is not a convolution of torch_geometric.nn")
    payload = torch.load(good, weights_only=True)
    payload["config"]["encoder"]["in_channels"] = 10**12  # 32 TB of weights if built
    torch.save(_resealed(payload), tmp_path / "wide.pt")
    cases["wide"] = (tmp_path / "wide.pt", "the configuration makes [16, 1000000000000]")
    payload = torch.load(good, weights_only=True)
    payload.pop("checksum", None)
    torch.save(payload, tmp_path / "unsealed.pt")
    cases["unsealed"] = (tmp_path / "unsealed.pt", "has no checksum")
    # Before: int64 weights embedded garbage, complex64 loaded with a warning, a sparse
    # weight raised a dispatcher traceback, `version: True` passed as 1.
    first = next(iter(torch.load(good, weights_only=True)["state_dict"]))
    retyped = {
        "int64": (lambda w: w.long(), f"weight {first!r} is of type torch.int64"),
        "complex64": (
            lambda w: w.to(torch.complex64),
            f"weight {first!r} is of type torch.complex64",
        ),
        "sparse": (lambda w: w.to_sparse(), f"weight {first!r} is a torch.sparse_coo tensor"),
    }
    for name, (change, message) in retyped.items():
        payload = torch.load(good, weights_only=True)
        payload["state_dict"][first] = change(payload["state_dict"][first])
        torch.save(_resealed(payload), tmp_path / f"{name}.pt")
        cases[name] = (tmp_path / f"{name}.pt", message)
    payload = torch.load(good, weights_only=True)
    payload["version"] = True
    torch.save(_resealed(payload), tmp_path / "version.pt")
    cases["version"] = (tmp_path / "version.pt", "has format version True")
    return cases


def test_damaged_or_forged_model_files_are_one_line(tmp_path, capsys):
    """Before: 64 flipped bytes and NaN weights embedded with exit status 0 (NaN or
    1.8e37-off embeddings), a convolution named Sequential / DataParallel raised
    AttributeError / IndexError; a file without a checksum loaded."""
    data = tmp_path / "g.npz"
    g = graph()
    np.savez(data, x=g.x.numpy(), edge_index=g.edge_index.numpy())
    out = tmp_path / "out"
    out.mkdir()
    for name, (path, message) in _forged_models(tmp_path).items():
        with pytest.raises(ValueError) as info:
            load_model(path)
        assert message in str(info.value) and path.name in str(info.value), (name, info.value)
        argv = ["embed", "--model", path, "--data", data, "--output", out / "z.npy"]
        one_line_error(*run_main(capsys, *map(str, argv))[::2], message)
    assert listing(out) == []


def test_a_model_or_config_that_is_not_a_regular_file_is_refused_at_once(tmp_path, capsys):
    """Before: a loop of symbolic links gave a traceback, ``/dev/zero`` and ``/dev/urandom``
    were read until the process was killed (a pipe would block), ``--config /dev/null``
    was said not to exist. (The loop comes first: the code before fails there at once.)"""
    loop = tmp_path / "loop.pt"
    os.symlink(tmp_path / "loop2.pt", loop)
    os.symlink(loop, tmp_path / "loop2.pt")
    fifo = tmp_path / "fifo.pt"
    os.mkfifo(fifo)
    cases = {loop: "is a loop of symbolic links, not a file", fifo: "is a pipe, not a file"}
    for device in ("/dev/zero", "/dev/urandom"):
        if os.path.exists(device):
            cases[Path(device)] = "is a device, not a file"
    data = tmp_path / "g.npz"
    g = graph()
    np.savez(data, x=g.x.numpy(), edge_index=g.edge_index.numpy())
    for path, message in cases.items():
        with pytest.raises(ValueError, match=f"model file {re.escape(repr(str(path)))} {message}"):
            load_model(path)
        argv = ["embed", "--model", path, "--data", data, "--output", tmp_path / "z.npy"]
        one_line_error(*run_main(capsys, *map(str, argv))[::2], message)
    if os.path.exists("/dev/null"):
        argv = ["train", "--config", "/dev/null", "--epochs", "1"]
        one_line_error(*run_main(capsys, *argv)[::2], "config file '/dev/null' is a device")
    assert not (tmp_path / "z.npy").exists()


def _inflated_models(tmp_path) -> dict[str, tuple]:
    """Small sealed model files whose configurations imply millions of modules or weights:
    ``(path, message)`` by name."""
    from torch_geometric.nn import ChebConv

    torch.manual_seed(0)
    plain = GRACEModel(GCNEncoder(10, 8), 8, 8, [EdgeDrop(0.2), FeatureMask(0.3)])
    good = save_model(plain, tmp_path / "good.pt")
    cheb = save_model(
        GRACEModel(GCNEncoder(10, 8, conv=ChebConv, conv_kwargs={"K": 2}), 8, 8),
        tmp_path / "cheb.pt",
    )
    edits = {
        "layers": (good, lambda c: c["encoder"].update(num_layers=10**7)),
        "K": (cheb, lambda c: c["encoder"]["conv_kwargs"].update(K=10**7)),
        "augmenters": (good, lambda c: c.update(augment1=c["augment1"][:1] * 10**5)),
    }
    cases = {}
    for name, (source, edit) in edits.items():
        payload = torch.load(source, weights_only=True)
        edit(payload["config"])
        torch.save(_resealed(payload), tmp_path / f"{name}.pt")
        cases[name] = tmp_path / f"{name}.pt"
    return {
        "layers": (cases["layers"], "num_layers is 10000000; the weights hold 2 encoder layers"),
        "K": (cases["K"], "implies weights the file does not hold"),
        "augmenters": (cases["augmenters"], "its configuration holds more than 10000 values"),
    }


def test_a_model_file_whose_config_implies_weights_it_lacks_is_refused_before_building(
    tmp_path, capsys, monkeypatch
):
    """Before: ``num_layers = 10**7``, ChebConv's ``K = 10**7`` or 10**5 augmenters in a
    resealed file built every module (``embed`` ran for minutes); now the configuration is
    compared with the file's weights first. Counted by the modules built (the test stops
    a build past 100,000 modules, as the code did before, with another message)."""
    built, real_init = [], torch.nn.Module.__init__

    def init(self, *args, **kwargs):
        built.append(None)
        if len(built) > 100_000:
            raise RuntimeError("the test stopped a build of more than 100000 modules")
        real_init(self, *args, **kwargs)

    data = tmp_path / "g.npz"
    g = graph()
    np.savez(data, x=g.x.numpy(), edge_index=g.edge_index.numpy())
    cases = _inflated_models(tmp_path)
    monkeypatch.setattr(torch.nn.Module, "__init__", init)
    for name, (path, message) in cases.items():
        built.clear()
        with pytest.raises(ValueError) as info:
            load_model(path)
        assert message in str(info.value) and path.name in str(info.value), (name, info.value)
        assert len(built) < 1_000, name
    argv = ["embed", "--model", cases["layers"][0], "--data", data, "--output", tmp_path / "z.npy"]
    one_line_error(*run_main(capsys, *map(str, argv))[::2], cases["layers"][1])


@pytest.fixture(scope="module")
def small_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("small")
    g = graph()
    np.savez(folder / "g.npz", x=g.x.numpy(), edge_index=g.edge_index.numpy())
    save_model(GRACEModel(GCNEncoder(10, 8), 8, 8), folder / "m.pt")
    return folder


def _python(code: str, *args) -> list[str]:
    prefix = f"import sys; sys.path[:0] = [{str(TESTS)!r}, {str(TESTS.parent)!r}, {str(REPO)!r}]; "
    return [sys.executable, "-c", prefix + code, *map(str, args)]


def _killed_in_write(model, data, out) -> subprocess.CompletedProcess:
    """``embed`` in a subprocess, SIGKILLed after writing 40 % of its output."""
    code = (
        "import os, signal, io, numpy as np\n"
        "real = np.save\n"
        "def save(fh, array, **kw):\n"
        "    buffer = io.BytesIO(); real(buffer, array, **kw); data = buffer.getvalue()\n"
        "    fh.write(data[: len(data) * 2 // 5]); fh.flush()\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
        "np.save = save\n"
        "from pyg_progcl.cli import main\n"
        "main(sys.argv[1:])\n"
    )
    argv = ["embed", "--model", model, "--data", data, "--output", out, "-q", "--threads", "1"]
    return subprocess.run(_python(code, *argv), capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(REPO)})  # fmt: skip


def _writing_forever(path) -> subprocess.Popen:
    """Another live process in the middle of an atomic write to ``path``."""
    code = (
        "import importlib.util, time\n"
        f"spec = importlib.util.spec_from_file_location('f', {str(REPO / 'pyg_progcl/io/files.py')!r})\n"
        "files = importlib.util.module_from_spec(spec); spec.loader.exec_module(files)\n"
        "def write(tmp):\n"
        "    tmp.write_bytes(b'partial')\n"
        "    print('writing', flush=True)\n"
        "    time.sleep(120)\n"
        "files.atomic_write(sys.argv[1], write)\n"
    )
    proc = subprocess.Popen(_python(code, path), stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "writing"
    return proc


def temporaries(folder) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


@pytest.mark.slow  # processes killed inside their writes, one kept alive in its write
def test_a_killed_writes_temporary_file_is_removed_by_the_next_run(tmp_path, small_files, capsys):
    """Before: an embed SIGKILLed in its write left a hidden .tmp of part of the output,
    and no later run removed it."""
    out = tmp_path / "z.npy"
    np.save(out, np.arange(6, dtype=np.float32))
    before = out.read_bytes()
    model, data = small_files / "m.pt", small_files / "g.npz"
    killed = _killed_in_write(model, data, out)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    stale = temporaries(tmp_path)
    assert len(stale) == 1 and out.read_bytes() == before  # the hostile tester's finding
    live = _writing_forever(tmp_path / "other.npy")
    try:
        (own,) = set(temporaries(tmp_path)) - set(stale)
        argv = ["embed", "--model", model, "--data", data, "--output", out, "-q"]
        status, _, err = run_main(capsys, *map(str, argv))
        assert status == 0, err
        assert temporaries(tmp_path) == [own]  # the dead run's is gone, the live run's kept
        assert np.load(out).shape == (120, 8)
    finally:
        live.kill()
        live.wait()
    # now its writer is dead too: a model saved there (as train --save-model does) removes it
    save_model(load_model(model), tmp_path / "m.pt")
    assert temporaries(tmp_path) == []
    assert listing(tmp_path) == ["m.pt", "z.npy"]
