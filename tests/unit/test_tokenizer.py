from nca_interp.tasks import make_task


def test_round_trip_every_rendering_and_context(tok):
    for name in ["sokoban", "frozenlake"]:
        for fmt in ["compact", "textarena"]:
            task = make_task(name, fmt)
            for i in range(5):
                level = task.level(i)
                texts = [task.prompt(level), task.target(level)]
                texts += [task.prompt(level, task.context(level, k)) for k in task.context_kinds]
                for text in texts:
                    ids = tok(text, add_special_tokens=False)["input_ids"]
                    assert tok.unk_token_id not in ids
                    assert tok.decode(ids) == text


def test_specials_and_reload(tok, tmp_path):
    from transformers import AutoTokenizer

    tok.save_pretrained(tmp_path)
    again = AutoTokenizer.from_pretrained(tmp_path)
    assert again.eos_token_id == tok.eos_token_id and again.pad_token_id == tok.pad_token_id
    assert again("P√\n")["input_ids"] == tok("P√\n")["input_ids"]
    assert len({tok.pad_token_id, tok.bos_token_id, tok.eos_token_id, tok.unk_token_id}) == 4
