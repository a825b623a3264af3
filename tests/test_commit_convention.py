"""The commit convention (CONTRIBUTING.md): the rules in .gitlint and .ci/gitlint/, the commit-msg hook that
`make hooks` installs, and the range CI's `make commits` checks."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from gitlint.config import LintConfigBuilder
from gitlint.git import GitContext
from gitlint.lint import GitLinter

from helpers import REPO_ROOT

# gitlint runs git for its settings: every test here starts a subprocess.
pytestmark = pytest.mark.integration

BODY = "\n\nThe suite ran as one block, so no subset was quick enough to run.\n"


def violations(message: str) -> list[str]:
    builder = LintConfigBuilder()
    builder.set_from_config_file(str(REPO_ROOT / ".gitlint"))
    builder.set_option("general", "extra-path", str(REPO_ROOT / ".ci" / "gitlint"))
    commit = GitContext.from_commit_msg(message).commits[-1]
    return [violation.rule_id for violation in GitLinter(builder.build()).lint(commit)]


@pytest.mark.parametrize(
    "subject",
    [
        "Add the unit tier",
        "Move the fused kernels to vitlab.accel",
        "Pass the seed through",
        "Embed the class names",
        "Bring back the --threads flag",
        "Focus the test on one thing",
        "Speed up the registry test",
        "Fix " + "a" * 68,
    ],
)
def test_subjects_in_the_imperative_pass(subject):
    assert violations(subject + BODY) == []


@pytest.mark.parametrize(
    ("message", "rule"),
    [
        ("Added the unit tier" + BODY, "UT1"),
        ("Adds the unit tier" + BODY, "UT1"),
        ("Adding the unit tier" + BODY, "UT1"),
        ("Fixes resume" + BODY, "UT1"),
        ("add the unit tier" + BODY, "UT1"),
        ("eval: a run's summary records its split" + BODY, "UT1"),
        ("Fix " + "a" * 69 + BODY, "T1"),
        ("Add the unit tier." + BODY, "T3"),
        ("Add the unit tier", "B6"),
        ("Add the unit tier\nno blank line before the body, which is long enough", "B4"),
        ("Add the unit tier\n\nToo short.", "B5"),
    ],
)
def test_each_rule_refuses_what_it_names(message, rule):
    assert rule in violations(message)


def git(repo: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "A Contributor",
        "GIT_AUTHOR_EMAIL": "contributor@example.org",
        "GIT_COMMITTER_NAME": "A Contributor",
        "GIT_COMMITTER_EMAIL": "contributor@example.org",
        # gitlint from the interpreter running the tests, wherever its virtual environment lies.
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    return subprocess.run(["git", *args], cwd=repo, env=env, capture_output=True, text=True, check=check)


@pytest.fixture
def repository(tmp_path):
    """A git repository whose first commit predates the convention and breaks it."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "core.hooksPath", str(repo / ".git" / "hooks"))  # not the user's global hooks
    (repo / "a.txt").write_text("a\n")
    git(repo, "add", "a.txt")
    git(
        repo,
        "commit",
        "-q",
        "-m",
        "history: a subject from before the convention, long and with no body at all, as they were",
    )
    return repo


def introduce_convention(repo: Path) -> None:
    (repo / ".ci").mkdir()
    shutil.copy(REPO_ROOT / ".gitlint", repo / ".gitlint")
    shutil.copytree(REPO_ROOT / ".ci" / "gitlint", repo / ".ci" / "gitlint")
    shutil.copy(REPO_ROOT / ".ci" / "check-commits", repo / ".ci" / "check-commits")
    git(repo, "add", ".gitlint", ".ci")
    git(repo, "commit", "-q", "-m", "Introduce the commit convention" + BODY)


def test_installed_hook_stops_a_commit_whose_message_breaks_the_convention(repository):
    hook = Path(git(repository, "rev-parse", "--git-path", "hooks").stdout.strip())
    hook = (repository / hook).resolve() / "commit-msg"
    hook.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO_ROOT / ".ci" / "commit-msg", hook)
    introduce_convention(repository)
    (repository / "b.txt").write_text("b\n")
    git(repository, "add", "b.txt")

    refused = git(repository, "commit", "-q", "-m", "Added b", check=False)
    assert refused.returncode != 0
    assert "UT1" in refused.stdout + refused.stderr and "B6" in refused.stdout + refused.stderr
    assert "commit stopped by the commit-msg hook" in refused.stderr
    assert git(repository, "rev-list", "--count", "HEAD").stdout.strip() == "2"

    git(repository, "commit", "-q", "-m", "Add b" + BODY)
    assert git(repository, "log", "-1", "--format=%s").stdout.strip() == "Add b"


def test_ci_checks_every_commit_since_the_convention_and_none_before(repository):
    introduce_convention(repository)
    check = ["bash", ".ci/check-commits"]
    env_gitlint = str(Path(sys.executable).parent / "gitlint")

    def run_check(**env: str) -> subprocess.CompletedProcess:
        full_env = {**os.environ, "GITLINT": env_gitlint, **env}
        return subprocess.run(check, cwd=repository, env=full_env, capture_output=True, text=True)

    passed = run_check()
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert "1 commit(s)" in passed.stdout  # the introducing commit; the history before it is not checked

    git(
        repository, "commit", "-q", "--allow-empty", "--no-verify", "-m", "Added nothing\n\nAn empty commit, as a test."
    )
    failed = run_check()
    assert failed.returncode != 0 and "UT1" in failed.stdout + failed.stderr

    base = git(repository, "rev-parse", "HEAD").stdout.strip()
    git(repository, "commit", "-q", "--allow-empty", "--no-verify", "-m", "Add nothing" + BODY)
    assert run_check(COMMITS_BASE=base).returncode == 0  # a branch checks only what it adds
