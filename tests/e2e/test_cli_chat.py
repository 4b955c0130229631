"""`loom chat` (the interactive terminal chat) driven through a pipe: each answer equals what
`loom generate --chat` gives for the same conversation (greedy), /reset starts over, and an
adapter changes the answer."""
import json
import shutil
import subprocess

from conftest import ADAPTER_FIXTURES, loom_bin


def run_chat(model_dir, lines, *extra):
    p = subprocess.run([str(loom_bin()), "chat", "--model", str(model_dir), "--max-tokens", "12",
                        *extra], input=("\n".join(lines) + "\n").encode(), capture_output=True, timeout=120)
    assert p.returncode == 0, p.stderr.decode(errors="replace")
    return p.stdout


def generate_chat(model_dir, tmp_path, messages, *extra):
    f = tmp_path / "messages.json"
    f.write_text(json.dumps(messages))
    p = subprocess.run([str(loom_bin()), "generate", "--model", str(model_dir), "--chat", str(f),
                        "--max-tokens", "12", "--temperature", "0", *extra],
                       capture_output=True, timeout=120)
    assert p.returncode == 0, p.stderr.decode(errors="replace")
    return p.stdout


def test_chat_turns_match_generate_with_the_whole_conversation(llama_dir, tmp_path):
    out = run_chat(llama_dir, ["Hello there", "And a second question"])
    # Two answers, one per line (the tiny model's text may itself hold newlines: compare bytes).
    first = generate_chat(llama_dir, tmp_path, [{"role": "user", "content": "Hello there"}])
    assert out.startswith(first)
    answer1 = first[:-1].decode("utf-8")
    second = generate_chat(llama_dir, tmp_path, [
        {"role": "user", "content": "Hello there"},
        {"role": "assistant", "content": answer1},
        {"role": "user", "content": "And a second question"}])
    assert out == first + second


def test_reset_forgets_the_conversation(llama_dir, tmp_path):
    out = run_chat(llama_dir, ["Hello there", "/reset", "Hello there"])
    first = generate_chat(llama_dir, tmp_path, [{"role": "user", "content": "Hello there"}])
    assert out == first + first


def test_adapter_changes_the_answer(llama_dir, tmp_path):
    spec = f"qv={ADAPTER_FIXTURES / 'llama_qv_r8_f32'}"
    with_adapter = run_chat(llama_dir, ["Hello there"], "--lora", spec)
    base = run_chat(llama_dir, ["Hello there"])
    assert with_adapter != base
    assert with_adapter == generate_chat(llama_dir, tmp_path,
                                         [{"role": "user", "content": "Hello there"}],
                                         "--lora", spec)


def test_a_folder_with_an_equals_sign_is_a_folder(llama_dir, tmp_path):
    # "sweep/lr=2e-4" is a folder, not NAME=DIR: it loaded ./2e-4 (another adapter, or none) as
    # adapter "sweep/lr". What comes before '=' must be an adapter name, and an existing path wins.
    sweep = tmp_path / "sweep" / "lr=2e-4"
    shutil.copytree(ADAPTER_FIXTURES / "llama_qv_r8_f32", sweep)
    shutil.copytree(ADAPTER_FIXTURES / "llama_mlp_r6", tmp_path / "2e-4")
    p = subprocess.run([str(loom_bin()), "inspect", "--model", str(llama_dir), "--lora", "sweep/lr=2e-4"],
                       capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "adapter 'lr=2e-4' (sweep/lr=2e-4)" in p.stdout + p.stderr, p.stdout + p.stderr
    with_path = run_chat(llama_dir, ["Hello there"], "--lora", str(sweep))
    assert with_path == run_chat(llama_dir, ["Hello there"], "--lora", f"qv={ADAPTER_FIXTURES / 'llama_qv_r8_f32'}")



def test_piped_turns_that_fail_make_the_exit_status_non_zero(llama_dir):
    # A context too small for one turn: each turn printed an error and the command still exited
    # 0, so a script reading answers from a pipe could not tell.
    p = subprocess.run([str(loom_bin()), "chat", "--model", str(llama_dir), "--max-tokens", "4",
                        "--max-model-len", "8"], input=b"Hello there\nAgain\n", capture_output=True,
                       timeout=120)
    err = p.stderr.decode(errors="replace")
    assert p.returncode == 1 and "fills the context" in err and "2 turn(s) failed" in err, err
