//! The `slack-channel` plugin in `bub gateway`, against a fake Slack (Web
//! API and Socket Mode) the test starts (`bub_tests::slack`): the second
//! IM channel.

use std::time::Duration;

use base64::Engine;
use bub_tests::{
    gateway::GatewayProcess,
    lib,
    provider::{chat, Provider},
    slack::{FakeSlack, APP_TOKEN, BOT_TOKEN, BOT_USER},
    Home,
};
use serde_json::{json, Value};

fn slack(home: &Home, fake: &FakeSlack, extra: Value) {
    let mut config = json!({"bot_token": BOT_TOKEN, "app_token": APP_TOKEN, "api_base": fake.api_base});
    for (k, v) in extra.as_object().unwrap() {
        config[k] = v.clone();
    }
    home.install("slack-channel", &lib("slack-channel"), config);
}

fn gateway(home: &Home, fake: &FakeSlack) -> GatewayProcess {
    let gateway =
        GatewayProcess::start(home.path(), &["--enable-channel", "slack"], &[("BUB_DEBOUNCE_SECONDS", "0.2")]);
    fake.wait_for("a Socket Mode connection", || fake.connections() >= 1);
    gateway
}

fn dm(user: &str, text: &str, ts: &str) -> Value {
    dm_in("D1", user, text, ts)
}

fn dm_in(channel: &str, user: &str, text: &str, ts: &str) -> Value {
    json!({"type": "message", "channel": channel, "user": user, "text": text, "ts": ts, "channel_type": "im"})
}

/// A direct message is acknowledged and answered in the conversation; a
/// long reply is split; a 429 waits its Retry-After.
#[test]
fn slack_direct_messages_are_acknowledged_and_answered() {
    let home = Home::new();
    let fake = FakeSlack::start();
    slack(&home, &fake, json!({"max_message_chars": 100}));
    let gateway = gateway(&home, &fake);

    fake.rate_limit("chat.postMessage", 1, 1);
    let id = fake.push_event(dm("U1", "hello slack", "100.1"));
    // The builtin's model-less echo of the prompt (Bub's JSON content,
    // about 170 characters): the refused post, then two pieces.
    fake.wait_for("the reply", || fake.posted("D1").len() >= 3);
    assert!(fake.acks().contains(&id), "acknowledged");
    let posts = fake.calls_of("chat.postMessage");
    assert!(posts[1].at - posts[0].at >= Duration::from_millis(950), "waited Retry-After");
    let posted = fake.posted("D1");
    assert_eq!(posted[0], posted[1], "the rate-limited post was repeated");
    assert!(posted.iter().all(|(t, thread)| t.chars().count() <= 100 && thread.is_none()), "{posted:?}");
    let reply: String = posted[1..].iter().map(|(t, _)| t.as_str()).collect();
    // (A cut at a space drops that space.)
    assert!(reply.contains(r#""message": "hello"#) && reply.contains(r#""sender_id": "U1""#), "{reply}");
    drop(gateway);
}

/// In channels only mentions and replies in the bot's threads start a
/// turn; replies go to the thread; allow-lists refuse others.
#[test]
fn slack_channels_mentions_threads_and_allow_lists() {
    let home = Home::new();
    let fake = FakeSlack::start();
    slack(&home, &fake, json!({"allow_users": "U1", "allow_channels": "C1,D1"}));
    let gateway = gateway(&home, &fake);

    let mention = format!("<@{BOT_USER}> what is up");
    fake.push_event(json!({"type": "message", "channel": "C9", "user": "U1", "text": mention, "ts": "1.0", "channel_type": "channel"}));
    fake.push_event(json!({"type": "message", "channel": "C1", "user": "U2", "text": mention, "ts": "2.0", "channel_type": "channel"}));
    fake.wait_for("the refusal", || !fake.posted("C1").is_empty());
    assert_eq!(fake.posted("C1")[0].0, "Access denied.");

    fake.push_event(json!({"type": "message", "channel": "C1", "user": "U1", "text": "idle chatter", "ts": "3.0", "channel_type": "channel"}));
    std::thread::sleep(Duration::from_millis(600));
    // A mention in a thread: the reply is in that thread; the same message
    // as `app_mention` too is one turn, not two.
    let in_thread = json!({"type": "message", "channel": "C1", "user": "U1", "text": mention, "ts": "4.0",
        "thread_ts": "3.5", "channel_type": "channel"});
    fake.push_event(in_thread.clone());
    let mut as_mention = in_thread;
    as_mention["type"] = json!("app_mention");
    fake.push_event(as_mention);
    fake.wait_for("the threaded reply", || fake.posted("C1").len() >= 2);
    let (text, thread) = fake.posted("C1")[1].clone();
    assert!(text.contains("what is up") && !text.contains("idle chatter"), "{text}");
    assert_eq!(thread.as_deref(), Some("3.5"));
    // A reply in that thread without a mention is for the bot too.
    fake.push_event(json!({"type": "message", "channel": "C1", "user": "U1", "text": "and then?", "ts": "5.0",
        "thread_ts": "3.5", "channel_type": "channel"}));
    fake.wait_for("the follow-up reply", || fake.posted("C1").len() >= 3);
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(fake.posted("C1").len(), 3, "{:?}", fake.posted("C1"));
    assert!(fake.posted("C9").is_empty(), "an unlisted channel gets nothing");
    drop(gateway);
}

/// Slack's `disconnect` and a dropped connection both lead to a new
/// connection (`apps.connections.open` again), and messages flow on it;
/// an image of a message reaches the model as an image part.
#[test]
fn slack_reconnects_when_asked_and_after_a_drop() {
    let home = Home::new();
    let provider = Provider::start(vec![chat::text("got it")]);
    home.use_model("openai:m", &provider.base_url, json!({}));
    let fake = FakeSlack::start();
    slack(&home, &fake, json!({}));
    let gateway = gateway(&home, &fake);
    fake.request_reconnect();
    fake.wait_for("a second connection", || fake.connections() >= 2);
    fake.drop_connection();
    fake.wait_for("a third connection", || fake.connections() >= 3);
    assert!(fake.calls_of("apps.connections.open").len() >= 3);
    // Connections that closed at once are followed by a growing backoff
    // (1 s, then 2 s), not reopened at once (~20 a second before).
    let opened = fake.opened();
    assert!(opened[1] - opened[0] >= Duration::from_millis(900), "{:?}", opened[1] - opened[0]);
    assert!(opened[2] - opened[1] >= Duration::from_millis(1900), "{:?}", opened[2] - opened[1]);
    let image = b"\x89PNG fake";
    let mut message = dm("U1", "still there?", "9.0");
    message["subtype"] = json!("file_share");
    message["files"] =
        json!([{"mimetype": "image/png", "url_private": fake.add_file("x.png", image), "size": image.len()}]);
    fake.push_event(message);
    fake.wait_for("the reply", || !fake.posted("D1").is_empty());
    assert_eq!(fake.posted("D1")[0].0, "got it");
    let request = provider.requests()[0].body.to_string();
    let data = base64::engine::general_purpose::STANDARD.encode(image);
    assert!(
        request.contains("still there?") && request.contains(&format!("data:image/png;base64,{data}")),
        "{request}"
    );
    drop(gateway);
}

/// Slack sends an unacknowledged event again (Events API retries, on the
/// next connection here). A stop must acknowledge only what the gateway
/// took: events that arrive while it stops (it refuses them) come back
/// after the next start and are answered there, each once.
#[test]
fn slack_events_refused_during_a_stop_are_answered_once_after_the_next_start() {
    let home = Home::new();
    let fake = FakeSlack::start();
    slack(&home, &fake, json!({}));
    home.scripted("slow", "", json!({"load_state": {"async": true, "sleep_ms": 1500, "return": null}}));
    let mut first = GatewayProcess::start(
        home.path(),
        &["--enable-channel", "slack"],
        &[("BUB_DEBOUNCE_SECONDS", "0.2"), ("BUB_SHUTDOWN_GRACE_SECONDS", "20")],
    );
    fake.wait_for("a Socket Mode connection", || fake.connections() >= 1);
    let before = fake.push_event(dm_in("D0", "U1", "before the stop", "1.0"));
    fake.wait_for("the first event acknowledged", || fake.acks().contains(&before));
    std::thread::sleep(Duration::from_millis(300));
    first.signal("TERM");
    fake.wait_for("the gateway stopping", || first.log().contains("stopping: no new messages"));
    let channels: Vec<String> = (1..=10).map(|n| format!("D{n}")).collect();
    let during: Vec<String> = channels
        .iter()
        .enumerate()
        .map(|(n, channel)| {
            fake.push_event(dm_in(channel, "U1", &format!("during the stop {channel}"), &format!("2.{n}")))
        })
        .collect();
    let status = first.wait(Duration::from_secs(60)).expect("the gateway exits once its turn is done");
    assert!(status.success(), "{status}\n{}", first.log());
    assert_eq!(fake.posted("D0").len(), 1, "the turn running at the stop was answered");
    let acked = fake.acks();
    for id in &during {
        assert!(!acked.contains(id), "{id} was acknowledged but not taken:\n{}", first.log());
    }

    let second = gateway(&home, &fake);
    for channel in &channels {
        fake.wait_for(&format!("the answer in {channel}"), || !fake.posted(channel).is_empty());
        assert!(
            fake.posted(channel)[0].0.contains(&format!("during the stop {channel}")),
            "{:?}",
            fake.posted(channel)
        );
    }
    std::thread::sleep(Duration::from_millis(2500));
    for channel in channels.iter().chain(["D0".to_owned()].iter()) {
        assert_eq!(fake.posted(channel).len(), 1, "{channel} answered more than once");
    }
    let acked = fake.acks();
    assert!(during.iter().all(|id| acked.contains(id)), "the retries were acknowledged once taken");
    println!("FAULT slack SIGTERM with 10 events arriving in the grace: 10 of 10 answered after the restart, 0 twice");
    drop(second);
}

/// The bot token goes only to Slack's file host over https (or the
/// configured API's origin): a `url_private` naming another host is not
/// fetched, and the message still reaches the turn.
#[test]
fn slack_never_sends_the_bot_token_to_a_file_url_on_another_host() {
    let home = Home::new();
    let fake = FakeSlack::start();
    let elsewhere = FakeSlack::start();
    slack(&home, &fake, json!({}));
    let gateway = gateway(&home, &fake);
    let mut message = dm("U1", "a picture", "5.0");
    message["subtype"] = json!("file_share");
    message["files"] = json!([{"mimetype": "image/png", "url_private": elsewhere.add_file("x.png", b"png"), "size": 3},
                              {"mimetype": "image/png", "url_private": "http://files.slack.com/x.png", "size": 3}]);
    fake.push_event(message);
    fake.wait_for("the reply", || !fake.posted("D1").is_empty());
    assert!(elsewhere.file_requests().is_empty(), "the token went to another host");
    drop(gateway);
}

/// Every Web API answer is read under `max_answer_bytes`: an endless 200
/// body to `chat.postMessage` fails that post with the setting named, and
/// the gateway stays small and answers the next message.
#[test]
fn slack_an_endless_api_answer_is_refused_at_its_cap() {
    let home = Home::new();
    let fake = FakeSlack::start();
    slack(&home, &fake, json!({"max_answer_bytes": 1_048_576}));
    let gateway = gateway(&home, &fake);
    fake.endless("chat.postMessage");
    fake.push_event(dm("U1", "first", "1.0"));
    fake.wait_for("the refusal in the log", || gateway.log().contains("BUB_SLACK_MAX_ANSWER_BYTES"));
    assert!(gateway.rss_kb() < 300_000, "the gateway grew to {} kB", gateway.rss_kb());
    fake.push_event(dm("U1", "second", "2.0"));
    fake.wait_for("the second answer", || fake.posted("D1").iter().any(|(t, _)| t.contains("second")));
    drop(gateway);
}
