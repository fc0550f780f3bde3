"""The launching machine keeps each application's secret in a file only its owner can read."""

from __future__ import annotations

import os
import stat

from stram.common import apps


def test_token_is_written_owner_only_and_read_back(tmp_path, monkeypatch):
    monkeypatch.setenv("STRAM_HOME", str(tmp_path))
    old = os.umask(0)  # even with a permissive umask
    try:
        path = apps.write_token("application_1_0001", "s3cret")
    finally:
        os.umask(old)
    # not under the application's APP_PATH ($STRAM_HOME/apps/<id>), which its containers are told
    assert path == str(tmp_path / "secrets" / "application_1_0001" / "token")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(tmp_path / "secrets").st_mode) == 0o700
    assert apps.read_token("application_1_0001") == "s3cret"
    assert apps.read_token("application_1_0002") is None


def test_yarn_tokens_are_kept_apart_from_local_applications(tmp_path, monkeypatch):
    monkeypatch.setenv("STRAM_HOME", str(tmp_path))
    apps.write_token("application_9_0001", "t", yarn=True)
    assert apps.read_token("application_9_0001", yarn=True) == "t"
    assert apps.read_token("application_9_0001") is None
    assert apps.local_apps() == []  # a YARN application's token is not a local application

