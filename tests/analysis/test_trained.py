import torch

from geofact.analysis.trained import TrainedModel
from geofact.task import SharedAttributeTask
from geofact.training.config import TrainConfig
from geofact.training.model import init_params
from geofact.training.sweep import run_sweep
from geofact.training.trainer import train_group


def test_a_trained_model_reads_back_what_the_trainer_measured(tmp_path):
    # trained past capacity: every fact right with a logit margin > 4 (seeds 4-9, float64 too), so no
    # rounding difference between the trainer's forward and this one can flip an argmax
    config = TrainConfig(N=32, R=3, d=32, batch_size=32, max_steps=400, lr=1e-2, seed=4)
    record = run_sweep([config], tmp_path, progress=False)[0]
    model = TrainedModel.load(tmp_path, config)
    h = model.hidden_states()
    assert h.shape == (3, 32, 32) and model.answers.shape == (3, 32)
    assert model.accuracy() == record["accuracy"] == 1.0  # same facts, same model, same argmax
    assert torch.equal(model.hidden_states(model.subject_embeddings), h)
    # states are relation-major: row r holds the queries (x, r) for every subject x
    assert torch.equal(model.predict(h)[1], model.predict(h[1][None])[0])
    assert torch.equal(model.attribute_vectors(), model.weights["E_out"].T)  # the default target
    assert torch.equal(model.attribute_vectors("embedding"), model.subject_embeddings)
    assert model.step is None and TrainedModel.load(tmp_path, config).weights.keys() == model.weights.keys()
    other = torch.randn(32, 32)
    assert not torch.equal(model.hidden_states(other), h)


def test_frozen_models_keep_their_random_subject_embeddings():
    config = TrainConfig(N=16, R=2, d=8, batch_size=16, max_steps=5, frozen_embeddings=True)
    result = train_group([config])[0]
    model = TrainedModel(config, result.params)
    assert torch.equal(model.subject_embeddings, init_params(config)["E_ent"])


def test_a_tasks_answers_are_drawn_once_and_each_model_holds_its_own_copy():
    from geofact.analysis.trained import task_answers

    config = TrainConfig(N=16, R=2, d=8, batch_size=16, seed=3)
    weights = init_params(config)
    first, second = TrainedModel(config, weights), TrainedModel(config, weights)
    assert torch.equal(first.answers, torch.as_tensor(SharedAttributeTask.random(16, 2, 3).bijections))
    first.answers[0, 0] += 1  # a model's table is its own: the task's and the next model's are untouched
    assert torch.equal(second.answers, task_answers(16, 2, 3)) and not torch.equal(first.answers, second.answers)
    assert task_answers(16, 2, 3) is task_answers(16, 2, 3)  # drawn once
