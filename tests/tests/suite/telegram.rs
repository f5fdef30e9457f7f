//! The `telegram-channel` plugin in `bub gateway`, against a fake Bot API
//! server the test starts (`bub_tests::telegram`): Bub 0.6's Telegram
//! channel (semantics §A5; `bub/channels/telegram.py`), with
//! replies sent by the channel (docs/gateway.md says why).

use std::time::{Duration, Instant};

use base64::Engine;
use bub_tests::{
    gateway::GatewayProcess,
    lib,
    provider::{chat, Provider},
    telegram::{group_text, private_text, FakeBotApi, Trouble, BOT_USERNAME, TOKEN},
    Home,
};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(60);

fn telegram(home: &Home, api: &FakeBotApi, extra: Value) {
    let mut config = json!({"token": TOKEN, "api_base": api.base, "poll_timeout": 1});
    for (k, v) in extra.as_object().unwrap() {
        config[k] = v.clone();
    }
    home.install("telegram-channel", &lib("telegram-channel"), config);
}

fn gateway(home: &Home, api: &FakeBotApi, env: &[(&str, &str)]) -> GatewayProcess {
    let mut env = env.to_vec();
    env.push(("BUB_DEBOUNCE_SECONDS", "0.2"));
    let gateway = GatewayProcess::start(home.path(), &["--enable-channel", "telegram"], &env);
    api.wait_for("the first getUpdates", WAIT, |calls| calls.iter().any(|c| c.method == "getUpdates"));
    gateway
}

fn texts_to(api: &FakeBotApi, chat: i64, n: usize) -> Vec<String> {
    api.wait_for(&format!("{n} messages to chat {chat}"), WAIT, |_| api.sent_to(chat).len() >= n);
    api.sent_to(chat)
}

/// A private message is a turn of session `telegram:<chat>`; the reply is
/// sent to the chat, "typing…" shows meanwhile, a long reply is split at
/// the 4096-character limit, `/start` is answered.
#[test]
fn telegram_private_messages_are_answered_typing_and_split() {
    let home = Home::new();
    let api = FakeBotApi::start();
    telegram(&home, &api, json!({}));
    let gateway = gateway(&home, &api, &[]);
    api.push_message(private_text(5, "hello telegram"));
    let sent = texts_to(&api, 5, 1);
    // The builtin's model-less echo: the prompt, whose content is Bub's
    // JSON of the message and its metadata.
    assert!(sent[0].contains(r#""message": "hello telegram""#), "{sent:?}");
    assert!(sent[0].contains(r#""sender_id": "5""#) && sent[0].contains(r#""type": "text""#), "{sent:?}");
    let typing = api.calls_of("sendChatAction");
    assert!(typing.iter().any(|c| c.params["chat_id"] == json!(5) && c.params["action"] == "typing"), "{typing:?}");
    assert!(home.path().join("tapes").read_dir().map(|d| d.count() > 0).unwrap_or(false), "the turn has a tape");

    api.push_message(private_text(5, &"long ".repeat(1200)));
    let sent = texts_to(&api, 5, 3);
    assert!(
        sent[1..].iter().all(|t| t.encode_utf16().count() <= 4096),
        "{:?}",
        sent.iter().map(String::len).collect::<Vec<_>>()
    );
    assert_eq!(sent.len(), 3, "6000 characters in two messages");

    let mut start = private_text(5, "/start");
    start["entities"] = json!([{"type": "bot_command", "offset": 0, "length": 6}]);
    api.push_message(start);
    let sent = texts_to(&api, 5, 4);
    assert_eq!(sent[3], "Bub is online. Send text to start.");
    drop(gateway);
}

/// Allow-lists (chats by id; users by id or username) and groups, where
/// only a mention of the bot or a reply to it starts a turn.
#[test]
fn telegram_allow_lists_and_group_mentions() {
    let home = Home::new();
    let api = FakeBotApi::start();
    telegram(&home, &api, json!({"allow_users": "7,user9", "allow_chats": "7,9,-100"}));
    let gateway = gateway(&home, &api, &[]);

    // A chat outside the list: ignored; its /start is told why.
    api.push_message(private_text(8, "let me in"));
    let mut start = private_text(8, "/start");
    start["entities"] = json!([{"type": "bot_command", "offset": 0, "length": 6}]);
    api.push_message(start);
    let sent = texts_to(&api, 8, 1);
    assert_eq!(sent, vec!["You are not allowed to chat with me. Please deploy your own instance of Bub."]);

    // An allowed group, a user outside the list: chatter that addresses
    // nobody gets no answer; a mention is refused, and a second one within
    // the minute is not answered again (strangers cannot spend the bot's
    // rate limit).
    api.push_message(group_text(-100, 8, "just chatting among us", json!([])));
    let mention = format!("@{BOT_USERNAME} hi");
    let entities = json!([{"type": "mention", "offset": 0, "length": BOT_USERNAME.len() + 1}]);
    api.push_message(group_text(-100, 8, &mention, entities.clone()));
    api.push_message(group_text(-100, 8, &mention, entities.clone()));
    assert_eq!(texts_to(&api, -100, 1), vec!["Access denied."]);

    // A listed user (by username): idle chatter is no turn, a mention is;
    // a group photo not for the bot is not even downloaded.
    api.add_file("group-photo", b"not for the bot");
    let mut photo = group_text(-100, 9, "", json!([]));
    photo.as_object_mut().unwrap().remove("text");
    photo["photo"] = json!([{"file_id": "group-photo", "file_unique_id": "g", "width": 1, "height": 1}]);
    api.push_message(photo);
    api.push_message(group_text(-100, 9, "idle chatter", json!([])));
    std::thread::sleep(Duration::from_millis(800));
    api.push_message(group_text(-100, 9, &format!("@{BOT_USERNAME} what now"), entities));
    let sent = texts_to(&api, -100, 2);
    assert!(sent[1].contains("what now") && !sent[1].contains("idle chatter"), "{sent:?}");
    assert_eq!(sent[0], "Access denied.", "one refusal for the chatter and two mentions: {sent:?}");
    // A private chat of a listed user.
    api.push_message(private_text(7, "just us"));
    assert!(texts_to(&api, 7, 1)[0].contains("just us"));
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(api.sent_to(8).len(), 1, "the unlisted chat got nothing else");
    assert!(api.calls_of("getFile").is_empty(), "an inactive message's file was fetched");
    drop(gateway);
}

/// A photo reaches the model as an image part (the file fetched through
/// getFile); a 429 with retry_after delays the reply instead of losing it;
/// a network drop of the polling connection is retried.
#[test]
fn telegram_media_rate_limits_and_network_drops() {
    let home = Home::new();
    let provider = Provider::start(vec![chat::text("nice photo"), chat::text("back again")]);
    home.use_model("openai:m", &provider.base_url, json!({}));
    let api = FakeBotApi::start();
    telegram(&home, &api, json!({}));
    let gateway = gateway(&home, &api, &[]);

    let image = b"\x89PNG\r\n\x1a\nfake image bytes";
    api.add_file("photo-1", image);
    api.trouble("sendMessage", vec![Trouble::RateLimit(1)]);
    let mut photo = private_text(5, "");
    photo.as_object_mut().unwrap().remove("text");
    photo["photo"] =
        json!([{"file_id": "photo-1", "file_unique_id": "u1", "width": 4, "height": 4, "file_size": image.len()}]);
    photo["caption"] = json!("look");
    api.push_message(photo);
    // The first send is refused (and recorded), the second goes through.
    assert_eq!(texts_to(&api, 5, 2), vec!["nice photo", "nice photo"]);
    let sends = api.calls_of("sendMessage");
    assert_eq!(sends.len(), 2, "the rate-limited send was repeated once");
    assert!(sends[1].at - sends[0].at >= Duration::from_millis(950), "it waited retry_after");
    let request = &provider.requests()[0].body;
    let data_url = format!("data:image/jpeg;base64,{}", base64::engine::general_purpose::STANDARD.encode(image));
    assert!(request.to_string().contains(&data_url), "the model saw the photo: {request}");
    assert!(request.to_string().contains("[Photo message] Caption: look"), "{request}");

    // The polling connection drops twice; the channel keeps polling.
    let polls = api.calls_of("getUpdates").len();
    api.trouble("getUpdates", vec![Trouble::Drop, Trouble::Drop]);
    api.wait_for("two dropped polls and a good one", WAIT, |calls| {
        calls.iter().filter(|c| c.method == "getUpdates").count() >= polls + 4
    });
    let started = Instant::now();
    api.push_message(private_text(5, "still there?"));
    assert_eq!(texts_to(&api, 5, 3)[2], "back again");
    assert!(started.elapsed() < WAIT);
    drop(gateway);
}

/// With `BUB_STREAM_OUTPUT=true` the reply is one message, sent at the
/// first text and edited as the model writes; the outbound completes it
/// instead of sending it again.
#[test]
fn telegram_streamed_replies_are_edited_into_one_message() {
    let home = Home::new();
    let provider = Provider::start(vec![chat::text("streamed reply here")]);
    home.use_model("openai:m", &provider.base_url, json!({}));
    let api = FakeBotApi::start();
    telegram(&home, &api, json!({"edit_interval_ms": 0}));
    let gateway = gateway(&home, &api, &[("BUB_STREAM_OUTPUT", "true")]);
    api.push_message(private_text(5, "stream it"));
    api.wait_for("the reply edited to its full text", WAIT, |calls| {
        calls.iter().any(|c| c.method == "editMessageText" && c.params["text"] == "streamed reply here")
    });
    std::thread::sleep(Duration::from_millis(500));
    let sent = api.sent_to(5);
    assert_eq!(sent.len(), 1, "one message, edited: {sent:?}");
    assert!("streamed reply here".starts_with(&sent[0]) && sent[0].len() < "streamed reply here".len(), "{sent:?}");
    drop(gateway);
}

/// Telegram confirms every update below the `offset` of the next
/// `getUpdates` and never sends it again (Bot API, getUpdates). A stop
/// must confirm only what the gateway took: messages that arrive while
/// it stops (it refuses them) stay with Telegram and are answered after
/// the next start, and nothing is answered twice.
#[test]
fn telegram_updates_refused_during_a_stop_are_answered_once_after_the_next_start() {
    let home = Home::new();
    let api = FakeBotApi::start();
    telegram(&home, &api, json!({}));
    home.scripted("slow", "", json!({"load_state": {"async": true, "sleep_ms": 1500, "return": null}}));
    let mut first = gateway(&home, &api, &[("BUB_SHUTDOWN_GRACE_SECONDS", "20")]);
    api.push_message(private_text(5, "before the stop"));
    api.wait_for("chat 5's turn running", WAIT, |calls| calls.iter().any(|c| c.method == "sendChatAction"));
    first.signal("TERM");
    first.wait_for_log("stopping: no new messages", WAIT, "the gateway did not begin to stop");
    let chats: Vec<u64> = (6..=15).collect();
    for chat in &chats {
        api.push_message(private_text(*chat, &format!("during the stop {chat}")));
    }
    let status = first.wait(WAIT).expect("the gateway exits once its turn is done");
    assert!(status.success(), "{status}\n{}", first.log());
    assert_eq!(api.sent_to(5).len(), 1, "the turn running at the stop was answered");
    assert!(first.log().contains("did not take a message"), "{}", first.log());
    for chat in &chats {
        assert!(api.sent_to(*chat as i64).is_empty(), "chat {chat} was answered by the stopping gateway");
    }

    let second = gateway(&home, &api, &[]);
    for chat in &chats {
        let sent = texts_to(&api, *chat as i64, 1);
        assert!(sent[0].contains(&format!("during the stop {chat}")), "{sent:?}");
    }
    std::thread::sleep(Duration::from_millis(2500));
    for chat in chats.iter().chain([5].iter()) {
        assert_eq!(api.sent_to(*chat as i64).len(), 1, "chat {chat} answered more than once");
    }
    println!(
        "FAULT telegram SIGTERM with 10 updates arriving in the grace: 10 of 10 answered after the restart, 0 twice"
    );
    drop(second);
}

/// Every Bot API answer is read under `max_answer_bytes`: an endless 200
/// body (a broken proxy, a hostile self-hosted Bot API) is refused with the
/// setting named, the gateway stays small, and polling goes on.
#[test]
fn telegram_an_endless_api_answer_is_refused_at_its_cap() {
    let home = Home::new();
    let api = FakeBotApi::start();
    telegram(&home, &api, json!({"max_answer_bytes": 1_048_576}));
    let gateway = gateway(&home, &api, &[]);
    api.trouble("getUpdates", vec![Trouble::Endless]);
    gateway.wait_for_log("BUB_TELEGRAM_MAX_ANSWER_BYTES", WAIT, "the endless answer was not refused");
    println!("FAULT telegram endless getUpdates answer: refused at 1 MiB");
    let rss_kb = gateway.rss_kb();
    assert!(rss_kb < 300_000, "the gateway grew to {rss_kb} kB");
    api.push_message(private_text(5, "still polling?"));
    assert!(texts_to(&api, 5, 1)[0].contains("still polling?"));
    drop(gateway);
}

/// "Access denied." to a stranger is sent off the receive loop, once: when
/// Telegram rate-limits it (429, retry after 20 s), it is dropped, and a
/// listed user's message that came after it is answered at once (a
/// refusal retried inside the loop held listed users up for 90 s).
#[test]
fn telegram_refusals_under_a_rate_limit_do_not_hold_up_listed_users() {
    let home = Home::new();
    let api = FakeBotApi::start();
    telegram(&home, &api, json!({"allow_users": "7"}));
    let gateway = gateway(&home, &api, &[]);
    api.trouble("sendMessage", vec![Trouble::RateLimit(20)]);
    api.push_message(private_text(8, "let me in"));
    api.wait_for("the refusal tried", WAIT, |calls| calls.iter().any(|c| c.method == "sendMessage"));
    let started = Instant::now();
    api.push_message(private_text(7, "am I held up?"));
    let sent = texts_to(&api, 7, 1);
    assert!(sent[0].contains("am I held up?"), "{sent:?}");
    assert!(started.elapsed() < Duration::from_secs(10), "the listed user waited {:?}", started.elapsed());
    std::thread::sleep(Duration::from_millis(500));
    let to_stranger = api.calls_of("sendMessage").iter().filter(|c| c.params["chat_id"] == json!(8)).count();
    assert_eq!(to_stranger, 1, "the rate-limited refusal was dropped, not retried");
    drop(gateway);
}

/// Two gateways in webhook mode on one PostgreSQL, as a load balancer's
/// targets: where each listens, and a client to deliver updates with.
struct Webhooks {
    gateways: [GatewayProcess; 2],
    urls: [String; 2],
    rt: tokio::runtime::Runtime,
    client: reqwest::Client,
}

const WEBHOOK_SECRET: &str = "s3cret_token-1";

impl Webhooks {
    fn start(
        pg: &bub_tests::postgres::Postgres,
        api: &FakeBotApi,
        homes: &[Home; 2],
        extra: Value,
        env: &[(&str, &str)],
    ) -> Webhooks {
        for home in homes {
            let mut hook = json!({"webhook_url": "https://bub.example/telegram", "webhook_listen": "127.0.0.1:0",
                "webhook_secret": WEBHOOK_SECRET});
            for (k, v) in extra.as_object().unwrap() {
                hook[k] = v.clone();
            }
            telegram(home, api, hook);
            home.install("tape-postgres", &lib("tape-postgres"), json!({"url": pg.url()}));
        }
        let gateways =
            homes.each_ref().map(|h| GatewayProcess::start(h.path(), &["--enable-channel", "telegram"], env));
        let address = |home: &Home| {
            let file = home.path().join("data/telegram-channel/webhook-address");
            let deadline = Instant::now() + WAIT;
            loop {
                if let Ok(text) = std::fs::read_to_string(&file) {
                    if !text.trim().is_empty() {
                        return format!("http://{}/telegram", text.trim());
                    }
                }
                assert!(Instant::now() < deadline, "no webhook address in {}", file.display());
                std::thread::sleep(Duration::from_millis(50));
            }
        };
        let urls = [address(&homes[0]), address(&homes[1])];
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        Webhooks { gateways, urls, rt, client: reqwest::Client::new() }
    }

    /// Delivers `update` to gateway `to` as Telegram does; the status, and
    /// how long the answer took.
    fn deliver(&self, to: usize, update: &Value, with_secret: bool) -> (u16, Duration) {
        let mut request = self.client.post(&self.urls[to]).json(update);
        if with_secret {
            request = request.header("X-Telegram-Bot-Api-Secret-Token", WEBHOOK_SECRET);
        }
        let started = Instant::now();
        let status = self.rt.block_on(async { request.send().await.expect("a webhook delivery").status().as_u16() });
        (status, started.elapsed())
    }

    fn stop(&mut self) {
        for g in &mut self.gateways {
            g.signal("TERM");
            assert!(g.wait(Duration::from_secs(30)).is_some_and(|s| s.success()), "{}", g.log());
        }
    }
}

/// The turns' order on chat `chat`'s one tape in PostgreSQL, read from `home`.
fn turns_on_tape(home: &Home, chat: i64, turns: usize) -> Vec<usize> {
    let session = format!("telegram:{chat}");
    let (found, err, ok) =
        bub_tests::run_bub(home, &["run", "--session-id", &session, ",tape.search query=turn limit=50"]);
    assert!(ok, "{err}");
    let order: Vec<usize> =
        (0..turns).map(|k| found.find(&format!(r#"\"message\": \"turn {k}\""#)).unwrap_or(usize::MAX)).collect();
    assert!(order.iter().all(|&at| at != usize::MAX), "every turn on the tape: {found}");
    order
}

/// Webhook mode, for several gateways behind one load balancer sharing one
/// bot. Two gateways on one PostgreSQL (tape-postgres with its session
/// lock) register the webhook with its secret, never poll, and get one
/// chat's updates alternately, delivered as Telegram delivers with
/// `max_connections=1` (the next once the last was answered): every turn
/// is answered once, in order, and lands on the chat's one tape. A
/// delivery without the secret token runs nothing (401); a repeated
/// delivery runs nothing more.
#[test]
fn telegram_webhooks_on_two_gateways_answer_a_chat_once_and_in_order() {
    let pg = match bub_tests::postgres::Postgres::start() {
        Ok(pg) => pg,
        Err(why) => return eprintln!("SKIPPED telegram_webhooks_on_two_gateways…: {why}"),
    };
    let api = FakeBotApi::start();
    let homes = [Home::new(), Home::new()];
    let mut hooks = Webhooks::start(&pg, &api, &homes, json!({}), &[]);
    let set = api
        .wait_for("two setWebhook calls", WAIT, |calls| calls.iter().filter(|c| c.method == "setWebhook").count() >= 2);
    let registered: Vec<&Value> = set.iter().filter(|c| c.method == "setWebhook").map(|c| &c.params).collect();
    assert!(
        registered.iter().all(|p| p["secret_token"] == WEBHOOK_SECRET && p["max_connections"] == 1),
        "{registered:?}"
    );
    assert!(api.calls_of("getUpdates").is_empty(), "no polling in webhook mode");
    let update = |k: i64| json!({"update_id": 1000 + k, "message": private_text(7, &format!("turn {k}"))});
    for k in 0..6 {
        assert_eq!(hooks.deliver(k as usize % 2, &update(k), true).0, 200, "turn {k}");
    }
    // Without the secret, or with a repeated update id: nothing runs.
    assert_eq!(hooks.deliver(0, &update(6), false).0, 401);
    assert_eq!(hooks.deliver(1, &update(5), true).0, 200);
    let sent = texts_to(&api, 7, 6);
    std::thread::sleep(Duration::from_millis(500));
    let sent_now = api.sent_to(7);
    assert_eq!(sent_now.len(), 6, "each turn answered once: {sent_now:?}");
    for (k, text) in sent.iter().enumerate() {
        assert!(text.contains(&format!(r#""message": "turn {k}""#)), "reply {k} out of order: {sent:?}");
    }
    hooks.stop();
    let order = turns_on_tape(&homes[0], 7, 6);
    assert!(order.windows(2).all(|w| w[0] > w[1]), "newest first, so turn 5 first: {order:?}");
    drop(pg);
}

/// Telegram delivers an update again when the answer is late (it does
/// not say how late; about ten seconds is observed) and holds the chat's
/// next updates meanwhile. Turns of 3 s with `webhook_answer_seconds=1`:
/// each delivery is answered within about a second while its turn runs
/// on; a repeat of a running update runs nothing; the next update, on the
/// other gateway, waits for the session's lock, so the chat's turns still
/// run once each and in order.
#[test]
fn telegram_webhooks_answer_before_a_long_turn_ends_and_keep_the_order() {
    let pg = match bub_tests::postgres::Postgres::start() {
        Ok(pg) => pg,
        Err(why) => return eprintln!("SKIPPED telegram_webhooks_answer_before_a_long_turn_ends…: {why}"),
    };
    let api = FakeBotApi::start();
    let homes = [Home::new(), Home::new()];
    for home in &homes {
        // Slow after tape-postgres's session lock (its load_state runs first).
        home.scripted("slow", "", json!({"load_state": {"async": true, "sleep_ms": 3000, "return": null}}));
    }
    let mut hooks =
        Webhooks::start(&pg, &api, &homes, json!({"webhook_answer_seconds": 1}), &[("BUB_DEBOUNCE_SECONDS", "0.2")]);
    api.wait_for("two setWebhook calls", WAIT, |calls| calls.iter().filter(|c| c.method == "setWebhook").count() >= 2);
    let update = |k: i64| json!({"update_id": 2000 + k, "message": private_text(9, &format!("turn {k}"))});
    let mut answered = Vec::new();
    for k in 0..4 {
        let (status, took) = hooks.deliver(k as usize % 2, &update(k), true);
        answered.push(format!("{:.2} s", took.as_secs_f64()));
        assert_eq!(status, 200, "turn {k}");
        assert!(took < Duration::from_millis(2500), "turn {k} answered after {took:?}, not when it ran");
        if k == 0 {
            // Telegram found the answer late and delivers it again, to the same gateway.
            let (status, took) = hooks.deliver(0, &update(0), true);
            assert!(status == 200 && took < Duration::from_millis(500), "a repeat answered at once: {status} {took:?}");
        }
    }
    println!("FAULT telegram webhook, 3 s turns, answer after 1 s: deliveries answered in {}", answered.join(", "));
    let sent = texts_to(&api, 9, 4);
    std::thread::sleep(Duration::from_millis(1000));
    assert_eq!(api.sent_to(9).len(), 4, "each turn answered once: {:?}", api.sent_to(9));
    for (k, text) in sent.iter().enumerate() {
        assert!(text.contains(&format!(r#""message": "turn {k}""#)), "reply {k} out of order: {sent:?}");
    }
    hooks.stop();
    let order = turns_on_tape(&homes[1], 9, 4);
    assert!(order.windows(2).all(|w| w[0] > w[1]), "newest first, so turn 3 first: {order:?}");
    drop(pg);
}

/// One webhook delivery to `url` with the secret, as Telegram makes it: its status.
fn deliver_once(url: &str, update: &Value) -> u16 {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let request =
            reqwest::Client::new().post(url).json(update).header("X-Telegram-Bot-Api-Secret-Token", WEBHOOK_SECRET);
        request.send().await.expect("a webhook delivery").status().as_u16()
    })
}

/// Telegram repeats an update when unsure it arrived, for up to a day. A
/// repeat runs nothing however it comes: to a gateway restarted since
/// (its memory of taken updates gone; the update's key is kept with the
/// session's tape), and to another gateway on the same PostgreSQL.
#[test]
fn telegram_repeats_run_nothing_after_a_restart_or_on_another_gateway() {
    let home = Home::new();
    let api = FakeBotApi::start();
    telegram(
        &home,
        &api,
        json!({"webhook_url": "https://bub.example/telegram", "webhook_listen": "127.0.0.1:0",
            "webhook_secret": WEBHOOK_SECRET}),
    );
    let url = |home: &Home| {
        let file = home.path().join("data/telegram-channel/webhook-address");
        let deadline = Instant::now() + WAIT;
        loop {
            let text = std::fs::read_to_string(&file).unwrap_or_default();
            if !text.trim().is_empty() {
                return format!("http://{}/telegram", text.trim());
            }
            assert!(Instant::now() < deadline, "no webhook address");
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    let update = json!({"update_id": 3000, "message": private_text(7, "only once")});
    let mut gateway = GatewayProcess::start(home.path(), &["--enable-channel", "telegram"], &[]);
    assert_eq!(deliver_once(&url(&home), &update), 200);
    assert_eq!(texts_to(&api, 7, 1).len(), 1);
    gateway.signal("TERM");
    assert!(gateway.wait(Duration::from_secs(30)).is_some_and(|s| s.success()), "{}", gateway.log());
    let _ = std::fs::remove_file(home.path().join("data/telegram-channel/webhook-address"));
    let gateway = GatewayProcess::start(home.path(), &["--enable-channel", "telegram"], &[]);
    assert_eq!(deliver_once(&url(&home), &update), 200, "a repeat is answered, so Telegram stops repeating it");
    let fresh = json!({"update_id": 3001, "message": private_text(7, "something new")});
    assert_eq!(deliver_once(&url(&home), &fresh), 200);
    let sent = texts_to(&api, 7, 2);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(api.sent_to(7).len(), 2, "the repeat ran nothing after the restart: {sent:?}");
    assert!(sent[1].contains("something new"), "{sent:?}");
    gateway.wait_for_log("delivered again", WAIT, "the repeat is logged");
    drop(gateway);

    let pg = match bub_tests::postgres::Postgres::start() {
        Ok(pg) => pg,
        Err(why) => return eprintln!("SKIPPED the two-gateway half of telegram_repeats_run_nothing…: {why}"),
    };
    let api = FakeBotApi::start();
    let homes = [Home::new(), Home::new()];
    let mut hooks = Webhooks::start(&pg, &api, &homes, json!({}), &[]);
    let update = json!({"update_id": 4000, "message": private_text(8, "one gateway runs it")});
    assert_eq!(hooks.deliver(0, &update, true).0, 200);
    texts_to(&api, 8, 1);
    assert_eq!(hooks.deliver(1, &update, true).0, 200);
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(api.sent_to(8).len(), 1, "the other gateway ran the repeat: {:?}", api.sent_to(8));
    hooks.stop();
    drop(pg);
}

/// By Telegram's rule an offset confirms every update below it. A Bot API
/// that sends an `update_id` no Telegram id comes near (`i64::MAX`) must
/// not make the channel confirm every later real update unseen: it is
/// skipped, and the next real message is answered.
#[test]
fn telegram_an_absurd_update_id_confirms_nothing_unseen() {
    let home = Home::new();
    let api = FakeBotApi::start();
    telegram(&home, &api, json!({}));
    let gateway = gateway(&home, &api, &[]);
    api.push_message_with_id(i64::MAX, private_text(5, "from a hostile server"));
    api.wait_for("the absurd update fetched", WAIT, |calls| {
        calls.iter().filter(|c| c.method == "getUpdates").count() >= 3
    });
    api.push_message(private_text(5, "a real one"));
    let sent = texts_to(&api, 5, 1);
    assert!(sent[0].contains("a real one"), "{sent:?}");
    let offsets: Vec<i64> = api.calls_of("getUpdates").iter().filter_map(|c| c.params["offset"].as_i64()).collect();
    assert!(offsets.iter().all(|o| *o < 1 << 53), "an offset passed every real update: {offsets:?}");
    assert!(gateway.log().contains("skipping update_id 9223372036854775807"), "{}", gateway.log());
    drop(gateway);
}
