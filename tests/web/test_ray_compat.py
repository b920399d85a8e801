"""The embedded queue's WebSocket compatibility tests (tests/web/test_web_websocket.py), run
against a --ray server: the same frames, in the same order, reach the submitting client."""
from __future__ import annotations

import pytest

from tests.web import test_web_websocket as embedded

CASES = [
    embedded.test_message_sequence_for_one_prompt,
    embedded.test_two_clients_do_not_see_each_others_progress,
    embedded.test_previews_are_type1_or_type4_by_client_flags,
    embedded.test_custom_events_from_nodes_reach_the_owner,
    embedded.test_reconnecting_client_gets_the_rest_of_its_prompt,
    embedded.test_queue_prompt_over_the_websocket,
    embedded.test_websocket_interrupt_only_stops_own_prompt,
    embedded.test_client_back_after_its_prompt_ended_still_gets_the_end,
]


@pytest.mark.parametrize("case", CASES, ids=[case.__name__ for case in CASES])
async def test_websocket_compatibility_in_ray_mode(ray_server, case):
    await case(ray_server)
