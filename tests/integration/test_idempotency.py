"""Idempotency-Key on a create (docs/api.md): a retry with the key gets the
sandbox the first create made, never a second; the key names one request;
a failed create forgets it."""

import threading
import uuid

import pytest

import corral
from conftest import SMALL


def post(d, spec, key):
    return d.request("POST", "/v1/sandboxes", spec, headers={"Idempotency-Key": key})


def test_a_retry_gets_the_first_creates_sandbox(corrald, client):
    key = f"k-{uuid.uuid4().hex}"
    spec = {"labels": {"idem": key}, "resources": {"memory_mb": 64}}
    first = post(corrald, spec, key)
    assert first.status == 201 and "idempotent-replayed" not in first.headers
    again = post(corrald, spec, key)
    assert again.status == 200 and again.headers.get("idempotent-replayed") == "true"
    assert again.json()["id"] == first.json()["id"]
    assert [s.id for s in client.list(labels={"idem": key})] == [first.json()["id"]]
    # the SDK's keyword, and a key is one request: another spec is refused
    sb = client.create(spec, idempotency_key=key)
    assert sb.id == first.json()["id"]
    with pytest.raises(corral.Conflict, match="another request"):
        client.create({**spec, "env": {"X": "1"}}, idempotency_key=key)
    sb.destroy()
    # a destroyed sandbox is still what the key made
    gone = post(corrald, spec, key)
    assert gone.status == 200 and gone.json()["state"] == "destroyed"


def test_a_failed_create_forgets_its_key(corrald, client):
    key = f"k-{uuid.uuid4().hex}"
    bad = post(corrald, {"image": "no-such-image"}, key)
    assert bad.status == 404
    assert post(corrald, {"image": "no-such-image"}, key).status == 404  # run again, not replayed
    ok = post(corrald, {"resources": {"memory_mb": 64}}, f"{key}-2")
    assert ok.status == 201
    client.get(ok.json()["id"]).destroy()


def test_concurrent_creates_with_one_key_make_one_sandbox(corrald, client):
    key = f"k-{uuid.uuid4().hex}"
    spec = {"labels": {"idem": key}, **{"resources": {"memory_mb": 64}}}
    answers = []
    threads = [threading.Thread(target=lambda: answers.append(post(corrald, spec, key)))
               for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    made = {r.json()["id"] for r in answers if r.status in (200, 201)}
    assert len(made) == 1, [(r.status, r.body[:100]) for r in answers]
    assert [r.status for r in answers].count(201) == 1
    assert all(r.status in (200, 201, 409) for r in answers)
    assert all("in progress" in r.json()["error"]["message"] for r in answers if r.status == 409)
    assert len(client.list(labels={"idem": key})) == 1
    client.get(made.pop()).destroy()


@pytest.mark.parametrize("key", ["", "a b", "é", "x" * 129])
def test_a_malformed_key_is_refused(corrald, key):
    r = corrald.request("POST", "/v1/sandboxes", {"resources": {"memory_mb": 64}},
                        headers={"Idempotency-Key": key})
    assert r.status == 400 and "Idempotency-Key" in r.json()["error"]["message"]


def test_a_retry_after_a_restart_gets_the_adopted_sandbox(corrald_factory):
    """corrald killed with -9 after the create answered (the client lost the
    answer): the restarted one adopts the sandbox and replays it to the
    retry; the key still names that one request."""
    d = corrald_factory()
    key = f"k-{uuid.uuid4().hex}"
    spec = {"labels": {"idem": key}, "resources": {"memory_mb": 64}}
    first = post(d, spec, key)
    assert first.status == 201
    d.kill()
    d.start()
    again = post(d, spec, key)
    assert again.status == 200 and again.headers.get("idempotent-replayed") == "true", again
    assert again.json()["id"] == first.json()["id"] and again.json()["state"] == "ready"
    assert [s["id"] for s in d.live_sandboxes()] == [first.json()["id"]]
    other = post(d, {**spec, "env": {"X": "1"}}, key)
    assert other.status == 409 and "another request" in other.error["message"], other
    d.request("DELETE", f"/v1/sandboxes/{first.json()['id']}")
    d.shutdown_and_check()
