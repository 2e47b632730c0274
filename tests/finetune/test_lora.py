"""LoRA fine-tuning: resume after an interruption, adapter round trip, refusals, and a real change of answer."""

from __future__ import annotations

import json

import numpy as np
import pytest

from hybrid_trader.errors import UserError
from hybrid_trader.finetune.examples import ExampleSet
from hybrid_trader.finetune.lora import FinetuneConfig, Trainer, checkpoint_dirs
from hybrid_trader.finetune.pipeline import adapter_config, finetune_run, load_run
from hybrid_trader.hindsight.labels import LabelConfig, OutcomeLabels
from hybrid_trader.llm.backends.transformers_backend import TransformersBackend
from hybrid_trader.llm.model_cache import ADAPTER_META
from hybrid_trader.llm.prompt import PromptBuilder
from hybrid_trader.run.rundir import ADAPTER
from tests.finetune.conftest import make_run

TINY = dict(lr=1e-2, rank=4, batch=4, eval_every=2, checkpoint_every=2, val_examples=8, seed=3)
LABELS = LabelConfig(horizon=30)


def adapter_weights(run_dir) -> dict:
    from safetensors.torch import load_file

    return load_file(str(checkpoint_dirs(run_dir / ADAPTER)[-1] / "adapter_model.safetensors"))


def test_interrupted_finetune_resumes_from_its_last_checkpoint_when_resumed(tmp_path, tiny_model):
    straight = make_run(tmp_path / "straight", str(tiny_model))
    finetune_run(straight, FinetuneConfig(steps=4, **TINY), LABELS, progress=False)

    killed = make_run(tmp_path / "killed", str(tiny_model))

    def kill_at_3(step: int) -> None:
        if step == 3:
            raise RuntimeError("killed")

    with pytest.raises(RuntimeError, match="killed"):
        finetune_run(killed, FinetuneConfig(steps=4, **TINY), LABELS, progress=False, on_step=kill_at_3)
    assert [p.name for p in checkpoint_dirs(killed / ADAPTER)] == ["step-000002"]
    result, _, _ = finetune_run(killed, FinetuneConfig(steps=4, **TINY), LABELS, resume=True, progress=False)
    assert (result.start_step, result.step) == (2, 4)
    a, b = adapter_weights(straight), adapter_weights(killed)
    assert a.keys() == b.keys() and all(np.allclose(a[k].numpy(), b[k].numpy(), atol=1e-6) for k in a)


def test_ctrl_c_saves_a_checkpoint_of_the_last_step_when_finetuning_is_interrupted(tiny_run):
    def ctrl_c(step: int) -> None:
        if step == 3:
            raise KeyboardInterrupt

    result, _, _ = finetune_run(tiny_run, FinetuneConfig(steps=6, **TINY), LABELS, progress=False, on_step=ctrl_c)
    assert result.interrupted and result.step == 3
    assert checkpoint_dirs(tiny_run / ADAPTER)[-1].name == "step-000003"
    meta = json.loads((tiny_run / ADAPTER / ADAPTER_META).read_text())
    assert meta["finished"] is False and meta["data"]["train"] and meta["base_fingerprint"]


def test_second_finetune_is_refused_when_the_run_has_an_adapter_and_no_resume(tiny_run):
    finetune_run(tiny_run, FinetuneConfig(steps=1, **TINY), LABELS, progress=False)
    with pytest.raises(UserError, match="already has a fine-tuned adapter"):
        finetune_run(tiny_run, FinetuneConfig(steps=1, **TINY), LABELS, progress=False)


def test_adapter_round_trip_gives_the_trained_models_scores_when_loaded_by_the_back_end(tiny_run):
    run = load_run(tiny_run)
    from hybrid_trader.finetune.examples import build_examples

    train = build_examples(run.market, run.config, run.llm, "train", purpose="train", label_config=LABELS,
                           max_states=12)
    trainer = Trainer(run.llm, FinetuneConfig(**TINY), train, train)
    rng = np.random.default_rng(0)
    for _ in range(3):
        trainer.step(trainer.sample(rng))
    folder = tiny_run / ADAPTER
    trainer.save_adapter(folder, {"base_model": run.llm.transformers.model,
                                  "base_fingerprint": trainer.fingerprint})
    trainer.model.eval()
    rows = np.arange(4)
    expected = trainer.torch.softmax(trainer.logits(trainer.train, rows, grad=False), -1).detach().numpy()

    cfg = adapter_config(run.llm, folder)
    tuned = TransformersBackend(cfg, PromptBuilder(cfg))
    base = TransformersBackend(run.llm, PromptBuilder(run.llm))
    queries = train.queries[:4]
    got, before = tuned.score(queries), base.score(queries)
    want = np.zeros_like(got)
    for a, ids in enumerate(tuned.action_ids):
        want[:, a] = expected[:, ids].sum(axis=1)
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-6)
    assert not np.allclose(got, before, rtol=1e-2, atol=0)  # the adapter changed the model


def test_adapter_made_for_another_base_model_is_refused_naming_both(tiny_run):
    run = load_run(tiny_run)
    folder = tiny_run / ADAPTER
    folder.mkdir()
    (folder / ADAPTER_META).write_text(json.dumps({"base_model": "phi-3-mini", "base_fingerprint": "0123abcd"}))
    cfg = adapter_config(run.llm, folder)
    with pytest.raises(UserError, match=r"trained on base model 'phi-3-mini' .*but llm.transformers.model is '.*tiny"):
        TransformersBackend(cfg, PromptBuilder(cfg))


def test_folder_without_adapter_metadata_is_refused_when_given_as_adapter(tiny_run, tmp_path):
    run = load_run(tiny_run)
    cfg = adapter_config(run.llm, tmp_path)
    with pytest.raises(UserError, match="not an adapter made by 'llm finetune'"):
        TransformersBackend(cfg, PromptBuilder(cfg))


@pytest.mark.llm
def test_tiny_lora_run_changes_the_answer_of_gemma_when_trained_on_a_few_examples(tmp_path, gemma_dir):
    run_dir = make_run(tmp_path / "run", "gemma-3-270m")
    run = load_run(run_dir)
    from hybrid_trader.finetune.examples import build_examples

    pool = build_examples(run.market, run.config, run.llm, "train", purpose="train", label_config=LABELS,
                          max_states=4)
    trainer = Trainer(run.llm, FinetuneConfig(lr=3e-3, rank=8, batch=4, seed=0), pool, pool)
    legal = [trainer._target_id(a) for a in (" HOLD", " BUY", " SELL")]
    rows = np.arange(len(pool))

    def answers() -> np.ndarray:
        trainer.model.eval()
        return trainer.logits(trainer.train, rows, grad=False)[:, legal].argmax(-1).numpy()

    before = answers()
    target = int((np.bincount(before, minlength=3) == 0).argmax())  # an answer the base model never gives here
    labels = OutcomeLabels(t=pool.labels.t, session=pool.labels.session, pnl=pool.labels.pnl,
                           exit_index=pool.labels.exit_index, label=np.full(len(pool), target, np.int8))
    taught = ExampleSet("train", pool.queries, labels, pool.source, pool.candidates, pool.labelled)
    trainer.train = trainer._encode(taught)
    after = before
    for _ in range(8):
        trainer.step(rows)
        after = answers()
        if (after == target).all():
            break
    assert (before != target).all() and (after == target).any()
