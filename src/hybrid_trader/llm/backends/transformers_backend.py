"""Local model through Hugging Face transformers (default: Gemma 3 270M from the packaged GGUF).

Scoring, one forward pass per batch:

1. The shared prefix (system text + examples) is run once per market; its key/value
   cache is kept. Each batch copies it, repeats it over the batch, and runs only the
   per-query suffixes (tens of tokens), padded *between* prefix and suffix so that the
   last position of every row is its real last token and ``logits_to_keep=1`` suffices.
   Position ids skip the padding, so every row sees exactly the positions it would see
   unbatched.
2. The next-token distribution (softmax over the whole vocabulary) is read at the
   first token of each action name. The six names start with distinct tokens (HOLD,
   BUY, SELL, MOVE, ENABLE, DISABLE), so the first token decides which name the model
   has begun to write: P(name) is the probability of its first token (the model's
   continuation after it is forced). With ``scoring.case_variants`` the first tokens
   of ' Buy' and ' buy' count too, and so do the forms without a leading space. A
   token shared by two names would be ambiguous and is dropped (a test checks none is).

Generation reuses the prefix cache the same way and decodes greedily (or samples) until
a newline.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import threading
import warnings
from collections.abc import Iterator, Sequence

import numpy as np

from hybrid_trader.errors import UserError
from hybrid_trader.llm.advice import ACTION_WORDS
from hybrid_trader.llm.backends.base import Backend, BackendError
from hybrid_trader.llm.config import LLMConfig
from hybrid_trader.llm.model_cache import check_adapter, quiet_load_progress, resolve_model_dir
from hybrid_trader.llm.parsing import has_decision_line
from hybrid_trader.llm.prompt import PromptBuilder, RenderedQuery

log = logging.getLogger(__name__)

_INSTALL_FIX = "install the LLM extra: pip install -e '.[llm]'"


def prefer_passive_openmp() -> bool:
    """Set ``OMP_WAIT_POLICY=PASSIVE`` if torch is not imported yet and the user chose nothing.

    The advisor's worker thread runs the model while the caller's thread keeps stepping
    environments; with OpenMP's default spin-waiting, the model's threads burn the cores
    the caller needs (and vice versa), and a batch took 3-6x longer on a busy 2-core
    machine. Passive waiting frees them. Only effective before torch is imported, so the
    command-line entry points call it first. Returns True when it set the variable.
    """
    import os
    import sys

    if "torch" in sys.modules or "OMP_WAIT_POLICY" in os.environ:
        return False
    os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
    return True


def surface_forms(word: str, case_variants: bool) -> list[str]:
    """Ways the model may start writing an action name: with/without a leading space, cases."""
    forms = [word]
    if case_variants:
        forms += ["_".join(p.capitalize() for p in word.split("_")), word.lower()]
    out = []
    for f in forms:
        out += [" " + f, f]
    return out


def action_first_tokens(tokenizer, case_variants: bool = True) -> list[list[int]]:
    """For each action (Action order) the token ids that begin its name; shared ids are removed."""
    owner: dict[int, set[int]] = {}
    for a, word in enumerate(ACTION_WORDS):
        for form in surface_forms(word, case_variants):
            ids = tokenizer(form, add_special_tokens=False).input_ids
            if ids:
                owner.setdefault(int(ids[0]), set()).add(a)
    per_action: list[list[int]] = [[] for _ in ACTION_WORDS]
    for tid, actions in owner.items():
        if len(actions) == 1:
            per_action[next(iter(actions))].append(tid)
        else:
            log.info("token %r begins several action names %s; not counted", tokenizer.convert_ids_to_tokens(tid),
                     [ACTION_WORDS[a] for a in sorted(actions)])
    for a, ids in enumerate(per_action):
        if not ids:
            raise UserError(
                f"the tokenizer gives action {ACTION_WORDS[a]} no token of its own",
                fix="use a model whose tokenizer tells the action names apart, or generation mode (llm.mode: generate)",
            )
    return [sorted(ids) for ids in per_action]


def batch_cache_view(cache, batch: int):
    """A cache for ``batch`` rows that shares the prefix tensors (expanded views, no copies).

    Cache layers never modify their tensors in place (``update`` concatenates into new
    ones), so the stored prefix cache stays intact for the next batch.
    """
    view = copy.copy(cache)
    layers = []
    for layer in cache.layers:
        new = copy.copy(layer)
        if getattr(layer, "keys", None) is not None and layer.keys.numel():
            new.keys = layer.keys.expand(batch, *layer.keys.shape[1:])
            new.values = layer.values.expand(batch, *layer.values.shape[1:])
        layers.append(new)
    view.layers = layers
    return view


def stacked_cache_view(torch, caches: list, rows: list[int]):
    """A cache whose row ``i`` is the one-row prefix cache ``caches[rows[i]]``, each left-padded with zeros
    to the longest prefix: one forward pass for a batch whose rows read different cached prefixes
    (retrieval's groups). The padding is masked out by :func:`mixed_suffix_inputs`; keys keep the
    rotary positions they were cached with, and a sliding-window layer counts the padded length.
    """
    longest = max(c.get_seq_length() for c in caches)
    index = torch.tensor(rows)
    view = copy.copy(caches[0])
    layers = []
    for n, layer in enumerate(caches[0].layers):
        new = copy.copy(layer)
        if getattr(layer, "keys", None) is not None and layer.keys.numel():
            stacked = []
            for name in ("keys", "values"):
                parts = [getattr(c.layers[n], name) for c in caches]
                parts = [torch.cat([t.new_zeros(*t.shape[:2], longest - t.shape[2], t.shape[3]), t], dim=2)
                         if t.shape[2] < longest else t for t in parts]
                stacked.append(torch.cat(parts).index_select(0, index))
            new.keys, new.values = stacked
            if hasattr(new, "cumulative_length"):
                new.cumulative_length = longest
        layers.append(new)
    view.layers = layers
    return view


def mixed_suffix_inputs(torch, pad_id: int, prefix_lens: list[int], s_ids: list[list[int]], device) -> dict:
    """:func:`suffix_inputs` for rows whose cached prefixes have ``prefix_lens[i]`` tokens, left-padded to the
    longest (:func:`stacked_cache_view`): each row's mask covers its own prefix, its positions follow it."""
    P = max(prefix_lens)
    kwargs = suffix_inputs(torch, pad_id, P, s_ids, "cpu")
    mask = kwargs["attention_mask"]
    for i, n in enumerate(prefix_lens):
        mask[i, :P - n] = 0
    pos = (mask.cumsum(-1) - 1).clamp(min=0)[:, P:]
    return dict(input_ids=kwargs["input_ids"].to(device), attention_mask=mask.to(device), position_ids=pos.to(device))


def suffix_inputs(torch, pad_id: int, prefix_len: int, s_ids: list[list[int]], device) -> dict:
    """Model inputs of suffixes that follow a cached prefix of ``prefix_len`` tokens.

    Padding sits *between* prefix and suffix, so the last position of every row is its
    real last token; position ids skip the padding.
    """
    B, L, P = len(s_ids), max(len(s) for s in s_ids), prefix_len
    ids = torch.full((B, L), pad_id, dtype=torch.long)
    mask = torch.zeros((B, P + L), dtype=torch.long)
    mask[:, :P] = 1
    for i, s in enumerate(s_ids):
        ids[i, L - len(s):] = torch.tensor(s)
        mask[i, P + L - len(s):] = 1
    pos = (mask.cumsum(-1) - 1).clamp(min=0)[:, P:]
    return dict(input_ids=ids.to(device), attention_mask=mask.to(device), position_ids=pos.to(device))


def full_inputs(torch, pad_id: int, p_ids: list[int], s_ids: list[list[int]], device) -> dict:
    """Model inputs of whole sequences (prefix + suffix), left padded."""
    full = [p_ids + s for s in s_ids]
    B, T = len(full), max(len(f) for f in full)
    ids = torch.full((B, T), pad_id, dtype=torch.long)
    mask = torch.zeros((B, T), dtype=torch.long)
    for i, f in enumerate(full):
        ids[i, T - len(f):] = torch.tensor(f)
        mask[i, T - len(f):] = 1
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    return dict(input_ids=ids.to(device), attention_mask=mask.to(device), position_ids=pos.to(device))


@contextlib.contextmanager
def quiet_peft() -> Iterator[None]:
    """Silence peft's call of a transformers API deprecated in 4.5x (a FutureWarning per load: noise to users)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        yield


def load_adapter(model, adapter_dir: str):
    """The model with a LoRA adapter (peft) merged into its weights: inference costs what the base costs."""
    try:
        from peft import PeftModel
    except ImportError:
        raise UserError("llm.transformers.adapter needs peft", fix=_INSTALL_FIX) from None
    try:
        with quiet_peft():
            return PeftModel.from_pretrained(model, str(adapter_dir)).merge_and_unload()
    except (OSError, ValueError, RuntimeError, KeyError) as err:
        raise UserError(f"cannot load the adapter: {str(err)[:300]}", file=str(adapter_dir),
                        fix="point llm.transformers.adapter at a folder written by 'hybrid-trader llm finetune'",
                        ) from None


class TransformersBackend(Backend):
    """A local causal language model (transformers), CPU or GPU."""

    name = "transformers"

    def __init__(self, config: LLMConfig, prompts: PromptBuilder) -> None:
        try:
            import torch
            from transformers import AutoModelForCausalLM, AutoTokenizer
        except ImportError:
            raise UserError("the transformers back end needs transformers and torch", fix=_INSTALL_FIX) from None
        self.torch = torch
        self.config = config
        self.prompts = prompts
        t = config.transformers
        self.model_dir = resolve_model_dir(t.model, t.cache_dir)
        if t.threads:
            torch.set_num_threads(int(t.threads))
        dtypes = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
        if t.dtype not in dtypes:
            raise UserError(f"llm.transformers.dtype '{t.dtype}' is not supported", value=t.dtype,
                            fix="use float32 (CPU), bfloat16 or float16 (GPU)")
        try:
            self.device = torch.device(t.device)
            self.tokenizer = AutoTokenizer.from_pretrained(str(self.model_dir), local_files_only=True)
            if config.prompt.chat_template and not getattr(self.tokenizer, "chat_template", None):
                raise UserError("llm.prompt.chat_template is true but the model has no chat template",
                                file=str(self.model_dir),
                                fix="set prompt.chat_template: false (base models such as Gemma 3 270M)")
            with quiet_load_progress():
                self.model = AutoModelForCausalLM.from_pretrained(
                    str(self.model_dir), dtype=dtypes[t.dtype], local_files_only=True
                ).to(self.device)  # type: ignore[arg-type]  # transformers types .to() as a decorated method
        except (OSError, ValueError, RuntimeError, AssertionError) as err:  # AssertionError: no CUDA build
            raise UserError(f"cannot load the model: {err}", file=str(self.model_dir),
                            fix="check llm.transformers.model/device; delete the cached folder to convert again",
                            ) from None
        self.adapter = None
        if t.adapter:
            self.adapter = check_adapter(t.adapter, self.model_dir, t.model)
            self.model = load_adapter(self.model, t.adapter)
        self.model.eval()
        self.pad_id = self.tokenizer.pad_token_id
        if self.pad_id is None:
            self.pad_id = self.tokenizer.eos_token_id or 0
        self.action_ids = action_first_tokens(self.tokenizer, config.scoring.case_variants)
        self._flat_ids = torch.tensor([i for ids in self.action_ids for i in ids], device=self.device)
        self._owner = np.array([a for a, ids in enumerate(self.action_ids) for _ in ids])
        self.sliding_window = getattr(self.model.config, "sliding_window", None)
        self._stop_ids: list[int] | None = None
        self._prefixes: dict[str, tuple] = {}
        self._warned_window = False
        self._warned_long = False
        self._lock = threading.Lock()
        self._chat_split: tuple[str, str] | None = None

    @property
    def stop_ids(self) -> list[int]:
        """End-of-sequence ids and every token containing a newline (an answer is one line)."""
        if self._stop_ids is None:
            vocab = self.tokenizer.get_vocab()
            ids = {i for t, i in vocab.items() if "\n" in t or "\u010a" in t or t == "<0x0A>"}
            ids.update(self._eos_ids())
            self._stop_ids = sorted(ids)
        return self._stop_ids

    def _eos_ids(self) -> list[int]:
        eos = self.tokenizer.eos_token_id
        if eos is None:
            return []
        return list(eos) if isinstance(eos, (list, tuple)) else [int(eos)]

    def describe(self) -> str:
        adapter = f" + adapter {self.config.transformers.adapter}" if self.adapter else ""
        return f"transformers:{self.model_dir}{adapter}"

    # ------------------------------------------------------------------ text
    def _texts(self, q: RenderedQuery) -> tuple[str, str]:
        """(prefix, suffix) text; with a chat template both are cut out of the rendered chat."""
        if not self.config.prompt.chat_template:
            return q.prefix, q.suffix
        sentinel = "\u2063CTX\u2063"
        chat = [{"role": "system", "content": q.prefix.rstrip()}, {"role": "user", "content": sentinel}]
        try:
            rendered = self.tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
        except Exception:
            chat = [{"role": "user", "content": q.prefix.rstrip() + "\n\n" + sentinel}]
            rendered = self.tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
        head, tail = str(rendered).split(sentinel, 1)
        body, answer = q.suffix.rsplit("\n", 1)
        return head, body + tail + answer

    def _encode_prefix(self, text: str) -> list[int]:
        has_bos = self.tokenizer.bos_token is not None and text.startswith(self.tokenizer.bos_token)
        return self.tokenizer(text, add_special_tokens=not has_bos).input_ids

    def _prefix(self, text: str):
        """(ids, DynamicCache) of a prefix, computed once."""
        hit = self._prefixes.get(text)
        if hit is not None:
            return hit
        torch = self.torch
        ids = self._encode_prefix(text)
        with torch.inference_mode():
            out = self.model(input_ids=torch.tensor([ids], device=self.device), use_cache=True, logits_to_keep=1)
        entry = (ids, out.past_key_values)
        if len(self._prefixes) > 16:
            self._prefixes.pop(next(iter(self._prefixes)))
        self._prefixes[text] = entry
        return entry

    @staticmethod
    def _batch_view(cache, batch: int):
        return batch_cache_view(cache, batch)

    # --------------------------------------------------------------- forward
    def _forward_last(self, prefix: str, suffixes: list[str], past_out: bool = False, extra: int = 0):
        """Logits of the last position of each row (B, V) and, if asked, the cache and masks for generation
        (``extra``: the tokens generation may add)."""
        torch = self.torch
        s_ids = [self.tokenizer(s, add_special_tokens=False).input_ids for s in suffixes]
        p_ids = self._encode_prefix(prefix)
        B, P = len(s_ids), len(p_ids)
        # The prefix cache is used unless the prefix alone overflows a sliding-window layer's cache
        # (those keep only the last window - 1 tokens), or prefix + query + answer pass the window:
        # a cached prefix stays whole where the model's own rule would stop attending to its first
        # tokens, so its scores would differ. Whole sequences follow the model's rule, as in generate().
        window = self.sliding_window
        use_cache = self.config.transformers.prefix_cache and not (window and window - 1 <= P)
        if use_cache and window and P + max(map(len, s_ids), default=0) + extra >= window:
            use_cache = False
            if not self._warned_long:
                self._warned_long = True
                log.warning("prompt prefix + query + answer reach %d tokens, past the model's %d-token sliding "
                            "window: such queries are scored whole, without the prefix cache (slower); shorten "
                            "llm.prompt.context_template or lower llm.prompt.retrieval.k",
                            P + max(map(len, s_ids)) + extra, window)
        elif self.config.transformers.prefix_cache and not use_cache and not self._warned_window:
            self._warned_window = True
            log.warning("the prompt prefix has %d tokens, past the model's %d-token sliding window: it cannot be "
                        "cached and every query pays for all of it (about 10x slower); shorten llm.prompt.system or "
                        "llm.prompt.examples", P, self.sliding_window)
        if use_cache:
            p_ids, p_cache = self._prefix(prefix)
            kwargs = suffix_inputs(torch, self.pad_id, P, s_ids, self.device)
            kwargs.update(past_key_values=self._batch_view(p_cache, B), use_cache=True)
        else:  # whole sequences, left padded
            kwargs = full_inputs(torch, self.pad_id, p_ids, s_ids, self.device)
            kwargs.update(use_cache=past_out)
        with torch.inference_mode():
            out = self.model(**kwargs, logits_to_keep=1)
        logits = out.logits[:, -1, :].float()
        if past_out:
            return logits, out.past_key_values, kwargs["attention_mask"], kwargs["position_ids"][:, -1]
        return logits

    def _groups(self, queries: Sequence[RenderedQuery]) -> dict[str, list[tuple[int, str]]]:
        groups: dict[str, list[tuple[int, str]]] = {}
        for i, q in enumerate(queries):
            prefix, suffix = self._texts(q)
            groups.setdefault(prefix, []).append((i, suffix))
        return groups

    def _forward_mixed(self, groups: dict[str, list[tuple[int, str]]]):
        """Logits of the last position of every row of several prefix groups in one forward pass (rows in
        the groups' order), or None when the prefix cache cannot serve them all (then a pass per group)."""
        torch, window = self.torch, self.sliding_window
        if len(groups) < 2 or not self.config.transformers.prefix_cache:
            return None
        prefixes = list(groups)
        cached = [self._prefix(p) if not (window and window - 1 <= len(self._encode_prefix(p))) else None
                  for p in prefixes]
        if any(c is None for c in cached):
            return None
        rows = [g for g, p in enumerate(prefixes) for _ in groups[p]]
        s_ids = [self.tokenizer(s, add_special_tokens=False).input_ids for p in prefixes for _, s in groups[p]]
        lens = [len(cached[g][0]) for g in rows]  # type: ignore[index]
        if window and max(lens) + max(map(len, s_ids)) >= window:
            return None
        kwargs = mixed_suffix_inputs(torch, self.pad_id, lens, s_ids, self.device)
        kwargs.update(past_key_values=stacked_cache_view(torch, [c[1] for c in cached], rows), use_cache=True)  # type: ignore[index]
        with torch.inference_mode():
            out = self.model(**kwargs, logits_to_keep=1)
        return out.logits[:, -1, :].float()

    def score(self, queries: Sequence[RenderedQuery]) -> np.ndarray:
        torch = self.torch
        out = np.zeros((len(queries), len(ACTION_WORDS)))
        try:
            with self._lock:
                groups = self._groups(queries)
                mixed = self._forward_mixed(groups)
                if mixed is not None:  # retrieval's groups: one pass, rows in the groups' order
                    groups = {"": [item for items in groups.values() for item in items]}
                for prefix, items in groups.items():
                    logits = mixed if mixed is not None else self._forward_last(prefix, [s for _, s in items])
                    probs = torch.softmax(logits, dim=-1)[:, self._flat_ids].cpu().numpy().astype(np.float64)
                    mass = np.zeros((len(items), len(ACTION_WORDS)))
                    mass[:, :] = [np.bincount(self._owner, weights=row, minlength=len(ACTION_WORDS)) for row in probs]
                    for (i, _), m in zip(items, mass):
                        out[i] = m
        except RuntimeError as err:  # e.g. out of memory
            raise BackendError(f"model forward failed: {err}", fix="lower llm.batching.max_batch") from err
        return out

    def generate(self, queries: Sequence[RenderedQuery], max_new_tokens: int, temperature: float) -> list[str]:
        torch = self.torch
        texts = [""] * len(queries)
        try:
            with self._lock:
                for prefix, items in self._groups(queries).items():
                    logits, cache, mask, last_pos = self._forward_last(prefix, [s for _, s in items], past_out=True,
                                                                        extra=max_new_tokens)
                    B = len(items)
                    done = torch.zeros(B, dtype=torch.bool)
                    gen: list[list[int]] = [[] for _ in range(B)]
                    # one line is an answer; a chain of thought runs over lines until its decision line ends
                    cot = self.prompts.chain_of_thought
                    stop = torch.tensor(self._eos_ids() if cot else self.stop_ids)
                    newline = torch.tensor(self.stop_ids)
                    for _ in range(max_new_tokens):
                        if temperature > 0:
                            nxt = torch.multinomial(torch.softmax(logits / temperature, -1), 1)[:, 0]
                        else:
                            nxt = logits.argmax(-1)
                        nxt = nxt.cpu()
                        is_stop = torch.isin(nxt, stop)
                        if cot:
                            at_newline = torch.isin(nxt, newline)
                            for b in range(B):
                                if at_newline[b] and not done[b] and has_decision_line(
                                        str(self.tokenizer.decode(gen[b], skip_special_tokens=True))):
                                    is_stop[b] = True
                        for b in range(B):
                            if not done[b] and not is_stop[b]:
                                gen[b].append(int(nxt[b]))
                        # a row stops at a newline/eos, but only once it has written something
                        done |= is_stop & torch.tensor([len(g) > 0 for g in gen])
                        if bool(done.all()):
                            break
                        mask = torch.cat([mask, torch.ones((B, 1), dtype=mask.dtype, device=mask.device)], 1)
                        last_pos = last_pos + 1
                        with torch.inference_mode():
                            o = self.model(input_ids=nxt[:, None].to(self.device), attention_mask=mask,
                                           position_ids=last_pos[:, None], past_key_values=cache, use_cache=True,
                                           logits_to_keep=1)
                        cache = o.past_key_values
                        logits = o.logits[:, -1, :].float()
                    for (i, _), g in zip(items, gen):
                        texts[i] = str(self.tokenizer.decode(g, skip_special_tokens=True))
        except RuntimeError as err:
            raise BackendError(f"model generation failed: {err}", fix="lower llm.batching.max_batch") from err
        return texts

    def close(self) -> None:
        """Nothing to release early: the model and its small prefix caches go with the object."""
