"""agent/ops/sessions.py: the session `agent chat -c` resumes is kept whole, an unknown
session is named with the close ones, `/new` with nothing to archive changes nothing."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from agent.errors import UserError
from agent.ops import sessions
from conftest import subjects
from fakeanthropic import reply

T0 = datetime(2030, 1, 1, 10, 0, tzinfo=timezone.utc)


def test_the_last_session_is_replaced_whole_never_written_through_a_link(vault, run,
                                                                         fake_anthropic,
                                                                         tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text("not the agent's\n")
    vault.state.mkdir(exist_ok=True)
    (vault.state / "last_session").symlink_to(outside)
    fake_anthropic.add(reply("Hi."))
    assert run("chat", "--new", "--session", "cli/kyoto", "-m", "hello").exit_code == 0
    assert outside.read_text() == "not the agent's\n"          # the link was replaced
    last = vault.state / "last_session"
    assert not last.is_symlink() and last.read_text() == "cli/kyoto\n"
    assert sessions.last_session(vault) == "cli/kyoto"
    assert [p.name for p in vault.state.iterdir() if p.name.startswith("last_session")] == \
        ["last_session"]                                         # no temporary left over


def test_an_unknown_session_is_named_with_the_close_ones(vault, run, fake_anthropic):
    fake_anthropic.add(reply("Hi."))
    run("chat", "--new", "--session", "cli/kyoto", "-m", "hello")
    with pytest.raises(UserError, match="No session cli/kyoot .* Did you mean cli/kyoto"):
        sessions.check_known(vault, "cli/kyoot")
    assert [s.key for s in sessions.list_sessions(vault)] == ["cli/kyoto"]


def test_new_with_nothing_to_archive_changes_nothing(vault):
    n = len(subjects(vault))
    done = sessions.new_conversation(vault, None, "cli/default", T0)
    assert done.entry is None and done.error is None
    assert done.said == "Nothing to archive; this is already a fresh conversation."
    assert len(subjects(vault)) == n
