"""The play-line task (``task_data``): every label is the play whose text holds the line, and no other chosen play
holds it; headings and stage directions are not lines; the split is held out, balanced and seeded."""

import pytest
import torch

from transformer_lib.data.corpus import shakespeare_works
from transformer_lib.data.task_data import DEFAULT_PLAYS, play_line_task, play_lines, strip_stage_directions

SAMPLE = """THE PLAY

DRAMATIS PERSONAE

KING LEAR, a king.
FOOL.

ACT I.

SCENE I. A heath.

[Enter Lear and Fool,
with a dog.]

KING LEAR.
Blow, winds, and crack your cheeks! [Thunder.] rage! blow!
You cataracts and hurricanoes, spout

FOOL.
O nuncle, court holy-water in a dry house

[Exeunt.]
"""


def test_play_lines_reads_speeches_only():
    lines = play_lines(SAMPLE)
    assert lines == [
        "Blow, winds, and crack your cheeks! rage! blow!",
        "You cataracts and hurricanoes, spout",
        "O nuncle, court holy-water in a dry house",
    ]
    assert play_lines(SAMPLE, min_words=7) == [
        "Blow, winds, and crack your cheeks! rage! blow!",
        "O nuncle, court holy-water in a dry house",
    ]
    assert strip_stage_directions("a [b [c] d] e\n[f\ng]h") == "a  e\n\nh"
    assert strip_stage_directions("a [unclosed\n\nb") == "a \n\nb"  # ends at the paragraph


@pytest.fixture(scope="module")
def task():
    return play_line_task(n_per_play=300, test_fraction=0.25, seed=0)


@pytest.fixture(scope="module")
def lines_of():
    works = shakespeare_works()
    return {p: set(play_lines(works[p])) for p in DEFAULT_PLAYS}, works


def test_labels_come_from_the_data(task, lines_of):
    lines, works = lines_of
    raw_lines = {
        p: {" ".join(line.split()) for line in strip_stage_directions(works[p]).splitlines()} for p in DEFAULT_PLAYS
    }
    for texts, labels in ((task.train_texts, task.train_labels), (task.test_texts, task.test_labels)):
        for text, label in zip(texts, labels.tolist()):
            play = task.label_names[label]
            assert text in lines[play]
            assert text in raw_lines[play]  # a line of the play's own text (stage directions cut out)
            assert all(text not in lines[other] for other in DEFAULT_PLAYS if other != play)


def test_split_is_held_out_balanced_and_sized(task):
    assert not set(task.train_texts) & set(task.test_texts)
    assert len(set(task.train_texts)) == len(task.train_texts) == 4 * 225
    assert len(task.test_texts) == 4 * 75
    assert torch.bincount(task.train_labels).tolist() == [225] * 4
    assert torch.bincount(task.test_labels).tolist() == [75] * 4
    assert task.train_labels.dtype == torch.long and task.label_names == DEFAULT_PLAYS
    assert all(len(t.split()) >= 6 for t in task.train_texts + task.test_texts)
    assert task.train_labels[:40].unique().numel() > 1  # shuffled, not grouped by play


def test_seeded(task):
    again = play_line_task(n_per_play=300, test_fraction=0.25, seed=0)
    other = play_line_task(n_per_play=300, test_fraction=0.25, seed=1)
    assert again.train_texts == task.train_texts and torch.equal(again.test_labels, task.test_labels)
    assert other.test_texts != task.test_texts


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="macbth"):
        play_line_task(plays=("macbth", "tempest"))
    with pytest.raises(ValueError, match=r"plays must hold at least 2 item\(s\)"):
        play_line_task(plays=("macbeth",))
    with pytest.raises(ValueError, match="hamlet"):  # a layout play_lines cannot read
        play_line_task(plays=("macbeth", "hamlet"))
    with pytest.raises(ValueError, match="n_per_play"):
        play_line_task(n_per_play=100_000)
    with pytest.raises(ValueError, match="test_fraction"):
        play_line_task(test_fraction=1.0)
    with pytest.raises(ValueError, match="min_words"):
        play_line_task(min_words=0)
