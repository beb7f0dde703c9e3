"""Secrets and tokens are never logged, and never listed once a webhook was created."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from sidecar.subscriptions import new_secret
from tests.support.receiver import running
from tests.support.sidecars import Sidecar

pytestmark = pytest.mark.kafka

TOKEN = "tok-9f8e7d6c5b4a3f2e1d0c"
WRONG_TOKEN = "not-the-token-0a1b2c3d4e"
SASL_PASSWORD = "sasl-pw-5e6f7a8b9c0d"


def forms(secret: str) -> list[str]:
    """A secret as it could leak: whole, or just its key (after ``whsec_``)."""
    return [secret, secret.removeprefix("whsec_")]


def test_secrets_and_tokens_stay_out_of_logs_and_listings(
    sidecar_factory: Callable[..., Sidecar],
    topic_factory: Callable[[int], str],
    group_id: str,
) -> None:
    topic = topic_factory(2)
    declared = new_secret()
    given = new_secret()
    with running(declared) as app:
        sidecar = sidecar_factory(
            group_id,
            topic,
            token=TOKEN,
            webhooks=[{"url": app.url, "secret": declared, "mode": "blocking", "id": "app"}],
            extra_env={
                "SIDECAR_LOG_LEVEL": "debug",
                "SIDECAR_KAFKA_SASL_USERNAME": "sidecar",
                "SIDECAR_KAFKA_SASL_PASSWORD": SASL_PASSWORD,
            },
        )
        sidecar.wait_stable()
        assert app.wait_for(lambda got: len(got) >= 1, 30)  # signed with the declared secret
        client, good = sidecar.client, sidecar.headers()

        with_secret = client.post(
            "/webhooks",
            headers=good,
            json={"url": "http://127.0.0.1:9/given", "secret": given, "mode": "async"},
        )
        generated = client.post(
            "/webhooks", headers=good, json={"url": "http://127.0.0.1:9/made", "mode": "async"}
        )
        assert with_secret.status_code == generated.status_code == 201
        assert with_secret.json()["secret"] == given  # shown once, at creation
        made = generated.json()["secret"]
        assert made.startswith("whsec_")
        refused = client.post(
            "/enforce-rebalance", headers={"Authorization": f"Bearer {WRONG_TOKEN}"}
        )
        assert refused.status_code == 401
        assert WRONG_TOKEN not in refused.text
        assert client.post("/enforce-rebalance", params={"wait": 30}, headers=good).is_success
        assert app.wait_for(lambda got: any(r.type.endswith("revoked") for r in got), 30)
        bad_secret = client.post(
            "/webhooks",
            headers=good,
            json={"url": "http://127.0.0.1:9/bad", "secret": "whsec_" + "!" * 40},
        )
        assert bad_secret.status_code == 422

        ids = [w["id"] for w in client.get("/webhooks").json()]
        webhook_listings = [
            client.get("/webhooks").text,
            *(client.get(f"/webhooks/{i}").text for i in ids),
            *(client.get(f"/webhooks/{i}/deliveries").text for i in ids),
        ]
        listings = [
            *webhook_listings,
            client.get("/assignment").text,
            client.get("/metrics").text,
            client.get("/openapi.json").text,
            client.get("/events", headers={"Accept": "application/json"}).text,
        ]
        assert (
            client.delete(f"/webhooks/{with_secret.json()['id']}", headers=good).status_code == 204
        )
        sidecar.stop()

    log = sidecar.log_path.read_text()
    assert "partitions revoked" in log  # the log saw the whole exercise
    leaks = [*forms(declared), *forms(given), *forms(made), TOKEN, WRONG_TOKEN, SASL_PASSWORD]
    for secret in leaks:
        assert secret not in log, f"{secret[:8]}... is in the log"
        for listing in listings:
            assert secret not in listing, f"{secret[:8]}... is in a listing"
    for listing in webhook_listings:
        assert "whsec_" not in listing
