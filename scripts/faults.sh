#!/usr/bin/env bash
# The fault runs of RELIABILITY.md, loopback only and
# bounded: stops and kills under gateway load for the three tape stores,
# PostgreSQL restarted and frozen, hostile providers and MCP servers, idle and
# slow HTTP clients, the gateway's turn caps; Telegram, Slack and Discord
# messages arriving while the gateway stops, an endless Bot API answer, a Python hook
# blocking the bridge's loop. They are tests of the suite (so
# scripts/test.sh and CI run them too); this prints their figures.
#
#   scripts/faults.sh        (honours CARGO_TARGET_DIR)
set -euo pipefail
cd "$(dirname "$0")/.."
export PYO3_PYTHON="${PYO3_PYTHON:-$(scripts/python-for-bridge.sh)}"
cargo test -q -p bub-tests --test suite -- --nocapture --test-threads 1 \
    faults:: \
    security::tape_postgres_survives_a_restart_and_a_frozen_server \
    security::every_accepted_message_is_answered_or_saved_on_every_stop \
    agent_run::endless_huge_and_trickling_streams_are_bounded_and_named \
    agent_run::builtin_tools_keep_at_most_tool_max_bytes_and_refuse_fifos \
    mcp::hostile_mcp_servers_are_bounded \
    gateway::http_channel_bounds_connections_heads_and_bodies \
    gateway::turn_caps_bound_the_gateway_and_keep_sessions_in_order \
    telegram::telegram_updates_refused_during_a_stop_are_answered_once_after_the_next_start \
    telegram::telegram_webhooks_answer_before_a_long_turn_ends_and_keep_the_order \
    slack::slack_events_refused_during_a_stop_are_answered_once_after_the_next_start \
    discord::discord_messages_refused_during_a_stop_or_sent_while_down_are_answered_once_after_the_next_start \
    telegram::telegram_an_endless_api_answer_is_refused_at_its_cap \
    slack::slack_an_endless_api_answer_is_refused_at_its_cap \
    python::a_python_hook_that_blocks_the_loop \
    2>&1 | grep -E '^(FAULT|SKIPPED|kill=|test |test result)|panicked'
