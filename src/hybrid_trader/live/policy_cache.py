"""The executor's numpy policy cached in the user's cache: a restart decides without importing torch.

Loading a run's model (Stable-Baselines3's ``MaskablePPO.load``: torch, the optimiser,
``torch._dynamo``) took about 3.5 s of every start of ``hybrid-trader run``, though the
executor decides phases 1 and 2 with the numpy forward (:mod:`hybrid_trader.live.fast_policy`),
which needs only the actor's weights and the normaliser's statistics. So the first start on
a run loads the model as before and writes them to the user's cache
(``$HYBRID_TRADER_CACHE/live_policy`` or ``~/.cache/hybrid_trader/live_policy``, never the run
folder, whose one writer is training), one file per key: the sha256 of the model and
normaliser files (the manifest's, which :func:`final_model` checks against the files); a
later start whose key matches builds the same
:class:`~hybrid_trader.live.fast_policy.NumpyAgentPolicy` from the file: the same float32 weights
and the same normalisation (``VecNormalize.normalize_obs``'s formula on the same
float64 statistics), hence the same decisions and probabilities. Torch is imported then only
if a decision is a near-tie of the numpy logits (``fast_policy.TIE_GAP``: torch decides it,
as before). A cache of another model (a retrained or resumed run), of another format, or
that cannot be read is ignored and written again (a note says so); one that cannot be
written (a read-only cache folder) costs only the next start's time. Phase 3 always loads the
model (the hybrid agent and its advisor run in torch).
"""

from __future__ import annotations

import hashlib
import io
import json
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from hybrid_trader.live.executor_parts import ExecutorOptions
from hybrid_trader.live.fast_policy import NumpyAgentPolicy
from hybrid_trader.live.live_policy import LivePolicy, live_policy
from hybrid_trader.llm.model_cache import cache_home
from hybrid_trader.run import RunDir, atomic_write_bytes, sha256_file
from hybrid_trader.run.model_files import final_model

if TYPE_CHECKING:
    from hybrid_trader.evaluation.policies import AgentPolicy

CACHE_FOLDER = "live_policy"
"""The caches' folder in the user's cache (``$HYBRID_TRADER_CACHE`` or ``~/.cache/hybrid_trader``)."""
FORMAT = 1
"""Bump when the file's layout changes: a cache of another format is rebuilt."""


class Normalizer:
    """``VecNormalize.normalize_obs`` of a flat observation, from the statistics alone (no SB3)."""

    def __init__(self, mean: np.ndarray, var: np.ndarray, epsilon: float, clip_obs: float) -> None:
        self.mean, self.var = np.asarray(mean, dtype=np.float64), np.asarray(var, dtype=np.float64)
        self.epsilon, self.clip_obs = float(epsilon), float(clip_obs)

    def normalize_obs(self, obs: np.ndarray) -> np.ndarray:
        """The same operations, in the same order and precision, as SB3's ``_normalize_obs`` + ``astype``."""
        return np.clip((obs - self.mean) / np.sqrt(self.var + self.epsilon), -self.clip_obs,
                       self.clip_obs).astype(np.float32)


class TorchModel:
    """The run's SB3 model and normaliser, loaded on first use."""

    def __init__(self, run_path: Path, device: str, normalize: bool) -> None:
        self.run_path, self.device, self.normalize = run_path, device, normalize
        self._loaded: tuple[Any, Any] | None = None

    @property
    def loaded(self) -> bool:
        return self._loaded is not None

    def get(self) -> tuple[Any, Any]:
        """``(model, vec)`` as ``evaluation.evaluate.load_policy`` gives them."""
        if self._loaded is None:
            # loads torch and Stable-Baselines3 (~3.5 s): only at a first start, for phase 3, or at a near-tie
            from hybrid_trader.evaluation.evaluate import load_policy

            model, vec, _ = load_policy(self.run_path, self.device, self.normalize)
            self._loaded = (model, vec)
        return self._loaded


class LazyAgent:
    """Stands for ``AgentPolicy(model, vec)`` behind a cached numpy policy: normalises with the cached
    statistics, and loads the torch model only when asked to decide (a near-tie)."""

    def __init__(self, torch_model: TorchModel, normalizer: Normalizer | None) -> None:
        self.torch_model = torch_model
        self.normalizer = normalizer
        self.name = "agent"
        self.deterministic = True
        self.result_extra = {"role": "agent"}
        self._agent: AgentPolicy | None = None

    def normalize(self, obs: np.ndarray) -> np.ndarray:
        return obs if self.normalizer is None else self.normalizer.normalize_obs(obs)

    def __call__(self, obs: np.ndarray, mask: np.ndarray, env: Any) -> int:
        if self._agent is None:
            # loads torch (with the model) only for a near-tie of the numpy forward
            from hybrid_trader.evaluation.policies import AgentPolicy

            self._agent = AgentPolicy(*self.torch_model.get())
        return int(self._agent(obs, mask, env))

    @property
    def last_probs(self) -> np.ndarray | None:
        """The torch policy's distribution of its last decision (None: it never decided)."""
        return None if self._agent is None else self._agent.last_probs


def cache_key(run: RunDir, model_path: Path, vec_path: Path | None) -> str:
    """What the cache was made from: the format, and the model's and normaliser's names and sha256."""
    parts = [f"format {FORMAT}"]
    for path in (model_path, vec_path):
        if path is not None:
            entry = run.manifest.expected(path)
            parts.append(f"{path.name} {entry['sha256'] if entry is not None else sha256_file(path)}")
    return "; ".join(parts)


def cache_path(key: str) -> Path:
    """The cache file of ``key``: named by its sha256, in the user's cache, outside every run folder."""
    return cache_home() / CACHE_FOLDER / f"{hashlib.sha256(key.encode()).hexdigest()[:32]}.npz"


def write_cache(path: Path, key: str, policy: NumpyAgentPolicy, vec: Any) -> str:
    """Write the numpy policy's weights and ``vec``'s statistics to ``path``; "" or why it could not."""
    arrays: dict[str, np.ndarray] = {"key": np.array(key)}
    order = []
    for i, layer in enumerate(policy.actor.spec):
        if isinstance(layer, tuple):
            arrays[f"w{i}"], arrays[f"b{i}"] = layer
            order.append("Linear")
        else:
            order.append(layer)
    arrays["layers"] = np.array(json.dumps(order))
    if vec is not None and vec.norm_obs:
        rms = vec.obs_rms
        if not hasattr(rms, "mean"):  # a dict observation: never cached (numpy_policy refuses it first)
            return "the normaliser holds several observation keys"
        arrays |= {"obs_mean": np.asarray(rms.mean), "obs_var": np.asarray(rms.var),
                   "epsilon": np.array(float(vec.epsilon)), "clip_obs": np.array(float(vec.clip_obs))}
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)  # type: ignore[arg-type]
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(path, buffer.getvalue())
    except OSError as err:
        return f"{path} could not be written ({err.strerror or err}): the next start loads torch again"
    return ""


def read_cache(path: Path, key: str, agent_for: Callable[[Normalizer | None], Any]) -> tuple[NumpyAgentPolicy | None,
                                                                                          str]:
    """The cached numpy policy at ``path`` if its key is ``key`` (``agent_for(normalizer)``: its fallback agent);
    else ``(None, why)`` ("" when there is no cache)."""
    if not path.is_file():
        return None, ""
    try:
        with np.load(path, allow_pickle=False) as z:
            if str(z["key"]) != key:
                return None, f"{path} was made from another model ({z['key']}; now {key})"
            spec: list[tuple[np.ndarray, np.ndarray] | str] = [
                (z[f"w{i}"], z[f"b{i}"]) if name == "Linear" else str(name)
                for i, name in enumerate(json.loads(str(z["layers"])))]
            norm = None
            if "obs_mean" in z.files:
                norm = Normalizer(z["obs_mean"], z["obs_var"], float(z["epsilon"]), float(z["clip_obs"]))
    except (OSError, ValueError, KeyError, TypeError, zipfile.BadZipFile, json.JSONDecodeError) as err:
        return None, f"{path} could not be read ({type(err).__name__}: {err})"
    return NumpyAgentPolicy(agent_for(norm), spec), ""


def executor_policy(run: RunDir, config: Any, options: ExecutorOptions | None = None,
                    say: Any = None) -> tuple[LivePolicy, TorchModel]:
    """The executor's policy (``live_policy``'s, as ``options`` choose its advisor) and the run's torch model,
    loaded only if needed (see the module doc)."""
    normalize = config.ppo.normalize_observations
    model_path, vec_path = final_model(run, normalize)  # a damaged or missing file fails here, cached or not
    torch_model = TorchModel(run.path, config.ppo.device, normalize)
    phase = config.env.phase
    path, key, notes = Path(), "", []
    if phase != 3:
        key = cache_key(run, model_path, vec_path)
        path = cache_path(key)
        cached, why = read_cache(path, key, lambda norm: LazyAgent(torch_model, norm))
        if cached is not None:
            return LivePolicy(cached, f"none (phase {phase})"), torch_model
        if why:
            notes.append(f"{why}: ignored, and written again")
    model, vec = torch_model.get()
    live = live_policy(config, model, vec, run.path, options, say=say)
    if phase != 3 and isinstance(live.policy, NumpyAgentPolicy):
        failed = write_cache(path, key, live.policy, vec)
        if failed:
            notes.append(failed)
    live.notes[:0] = notes
    return live, torch_model
