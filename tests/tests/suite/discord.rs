//! The `discord-channel` plugin in `bub gateway`, against a fake Discord
//! (Gateway and REST) the test starts (`bub_tests::discord`), whose
//! delivery rules are Discord's documented ones.

use std::time::Duration;

use base64::Engine;
use bub_tests::{
    discord::{FakeDiscord, BOT_ID, INTENTS, TOKEN},
    gateway::GatewayProcess,
    lib,
    provider::{chat, Provider},
    proxy::Proxy,
    python::discord_client_venv_or_skip,
    Home,
};
use serde_json::{json, Value};

fn discord(home: &Home, fake: &FakeDiscord, extra: Value) {
    let mut config = json!({"token": TOKEN, "api_base": fake.api_base});
    for (k, v) in extra.as_object().unwrap() {
        config[k] = v.clone();
    }
    home.install("discord-channel", &lib("discord-channel"), config);
}

fn gateway_with(home: &Home, fake: &FakeDiscord, env: &[(&str, &str)]) -> GatewayProcess {
    let mut all = vec![("BUB_DEBOUNCE_SECONDS", "0.2")];
    all.extend_from_slice(env);
    let gateway = GatewayProcess::start(home.path(), &["--enable-channel", "discord"], &all);
    fake.wait_for("a ready Gateway session", || fake.connected());
    gateway
}

fn gateway(home: &Home, fake: &FakeDiscord) -> GatewayProcess {
    gateway_with(home, fake, &[])
}

fn dm(channel: &str, author: &str, text: &str) -> Value {
    FakeDiscord::user_message(channel, None, author, text)
}

/// A direct message is answered in its channel as a reply to it: split
/// at 2,000 characters, pinging nobody, "typing…" while the turn runs; a
/// 429 waits its `retry_after`, an emptied bucket its reset.
#[test]
fn discord_direct_messages_are_answered_as_split_replies_with_typing() {
    let home = Home::new();
    let long = format!("{}\n\n{}", "a".repeat(1500), "b @everyone ".repeat(120).trim_end());
    let provider = Provider::start(vec![chat::text(&long)]);
    home.use_model("openai:m", &provider.base_url, json!({}));
    let fake = FakeDiscord::start();
    discord(&home, &fake, json!({}));
    let gateway = gateway(&home, &fake);
    let identify = &fake.identifies()[0];
    assert_eq!(identify["token"], TOKEN);
    assert_eq!(identify["intents"], INTENTS, "guild and direct messages, and their content");

    fake.rate_limit_posts(0.5, 1);
    fake.empty_post_bucket(1.0);
    let asked = fake.push_message(dm("1001", "U1", "hello discord"));
    fake.wait_for("the reply", || fake.posted("1001").len() >= 2);
    let posted = fake.posted("1001");
    assert_eq!(posted.len(), 2, "{posted:?}");
    assert!(posted.iter().all(|(text, _)| text.encode_utf16().count() <= 2000), "{posted:?}");
    assert_eq!(posted.iter().map(|(t, _)| t.as_str()).collect::<Vec<_>>().join("\n\n"), long.trim_end());
    assert!(posted.iter().all(|(_, reply_to)| reply_to.as_deref() == Some(asked.as_str())), "replies to it");
    let posts = fake.calls("POST /channels/1001/messages");
    assert_eq!(posts.len(), 3, "the rate-limited post was repeated once");
    assert!(posts[1].at - posts[0].at >= Duration::from_millis(450), "waited retry_after");
    assert!(posts[2].at - posts[1].at >= Duration::from_millis(950), "waited for the bucket's reset");
    assert!(
        posts.iter().all(|p| p.params["allowed_mentions"] == json!({"parse": [], "replied_user": false})),
        "no @everyone, no ping: {:?}",
        posts[0].params
    );
    assert!(!fake.calls("POST /channels/1001/typing").is_empty(), "typing while the turn ran");
    let request = provider.requests()[0].body.to_string();
    assert!(
        request.contains(r#"\"message\": \"hello discord\""#),
        "Bub's JSON content (json.dumps spacing): {request}"
    );
    assert!(request.contains(r#"\"sender_id\": \"U1\""#), "{request}");
    drop(gateway);
}

/// In guilds: chatter is not a turn; a mention, a reply to the bot, the
/// word "bub" and a thread named "bub…" are; `!bub ,help` is a command.
/// Unlisted channels are ignored; an unlisted user who addresses the bot
/// is told "Access denied.", once.
#[test]
fn discord_guild_mentions_replies_threads_commands_and_allow_lists() {
    let home = Home::new();
    let fake = FakeDiscord::start();
    discord(&home, &fake, json!({"allow_users": "U1,ann", "allow_channels": "2001,3001"}));
    fake.add_channel("3001", 11, "bub-research");
    let gateway = gateway(&home, &fake);
    let guild =
        |channel: &str, author: &str, text: &str| FakeDiscord::user_message(channel, Some("4001"), author, text);
    let mention = |channel: &str, author: &str| {
        let mut m = guild(channel, author, &format!("<@{BOT_ID}> what is up"));
        m["mentions"] = json!([{"id": BOT_ID, "username": "bub_test", "bot": true}]);
        m
    };

    fake.push_message(mention("2009", "U1"));
    fake.push_message(mention("2001", "U2"));
    fake.push_message(mention("2001", "U3"));
    fake.wait_for("the refusal", || !fake.posted("2001").is_empty());
    std::thread::sleep(Duration::from_millis(500));
    let refusals = fake.posted("2001");
    assert_eq!(refusals.len(), 1, "one refusal a minute per channel: {refusals:?}");
    assert_eq!(refusals[0].0, "Access denied.");

    // An allowed user by name (ann), then chatter, then a mention: one turn, of the mention.
    let mut by_name = guild("2001", "U7", "lunch?");
    by_name["author"]["username"] = json!("ann");
    fake.push_message(by_name);
    std::thread::sleep(Duration::from_millis(600));
    fake.push_message(mention("2001", "U1"));
    fake.wait_for("the reply to the mention", || fake.posted("2001").len() >= 2);
    let (reply, _) = fake.posted("2001")[1].clone();
    assert!(reply.contains("what is up") && !reply.contains("lunch?"), "chatter is not a turn of its own: {reply}");

    // A reply to the bot's message, without a mention.
    let bot_message = fake.calls("POST /channels/2001/messages").len();
    assert!(bot_message >= 2);
    let mut reply_to_bot = guild("2001", "U1", "and then?");
    reply_to_bot["type"] = json!(19);
    reply_to_bot["referenced_message"] = json!({"id": "1", "author": {"id": BOT_ID, "username": "bub_test", "bot": true},
        "content": "earlier"});
    fake.push_message(reply_to_bot);
    fake.wait_for("the reply to a reply", || fake.posted("2001").len() >= 3);
    assert!(fake.posted("2001")[2].0.contains("reply_to_message"), "{:?}", fake.posted("2001")[2]);

    // A thread named "bub…": every message is for the bot.
    fake.push_message(guild("3001", "U1", "in the thread"));
    fake.wait_for("the reply in the thread", || !fake.posted("3001").is_empty());

    // `!bub ,help`: a command, answered by the builtin.
    fake.push_message(guild("2001", "U1", "!bub ,help"));
    fake.wait_for("the command's answer", || fake.posted("2001").len() >= 4);
    assert!(fake.posted("2001")[3].0.contains("tape.info"), "the help text: {:?}", fake.posted("2001")[3]);
    std::thread::sleep(Duration::from_millis(500));
    assert!(fake.posted("2009").is_empty(), "an unlisted channel gets nothing");
    assert_eq!(fake.posted("2001").len(), 4, "{:?}", fake.posted("2001"));
    drop(gateway);
}

/// Heartbeats carry the last sequence number. A dropped connection, a
/// Reconnect (op 7) and an unacknowledged heartbeat each lead to a Resume
/// with the session and sequence, and what was dispatched meanwhile is
/// replayed and answered once; an Invalid Session leads to a new Identify.
#[test]
fn discord_heartbeats_resume_after_drops_and_identify_after_an_invalid_session() {
    let home = Home::new();
    let fake = FakeDiscord::with_heartbeat(Duration::from_millis(1000));
    discord(&home, &fake, json!({}));
    let gateway = gateway(&home, &fake);
    fake.wait_for("two heartbeats", || fake.heartbeats().len() >= 2);
    assert!(fake.heartbeats().iter().all(|d| d.as_u64() >= Some(1)), "{:?}", fake.heartbeats());

    fake.drop_connection();
    // Dispatched while the connection is down: replayed to the Resume.
    fake.push_message(dm("1001", "U1", "while dropped"));
    fake.wait_for("a resume", || fake.resumes().len() == 1 && fake.connected());
    let resume = &fake.resumes()[0];
    assert_eq!((resume["token"].as_str(), resume["session_id"].as_str()), (Some(TOKEN), Some("session-1")));
    fake.wait_for("the replayed message's answer", || !fake.posted("1001").is_empty());

    fake.request_reconnect();
    fake.wait_for("a second resume", || fake.resumes().len() == 2 && fake.connected());
    fake.stop_acknowledging();
    fake.wait_for("a third resume, after a heartbeat went unacknowledged", || fake.resumes().len() == 3);
    fake.wait_for("the connection back", || fake.connected());
    fake.invalidate_session();
    fake.wait_for("a second identify", || fake.identifies().len() == 2 && fake.connected());

    fake.push_message(dm("1002", "U1", "after all that"));
    fake.wait_for("the last answer", || !fake.posted("1002").is_empty());
    std::thread::sleep(Duration::from_millis(800));
    assert_eq!(fake.posted("1001").len(), 1, "answered once: {:?}", fake.posted("1001"));
    assert_eq!(fake.posted("1002").len(), 1);
    drop(gateway);
}

/// The Gateway never sends an event twice, and a new session gets no
/// replay. Messages that arrive while the gateway stops (it refuses them)
/// and while it is down are read back over REST after the next start,
/// and answered once each, in order.
#[test]
fn discord_messages_refused_during_a_stop_or_sent_while_down_are_answered_once_after_the_next_start() {
    let home = Home::new();
    let fake = FakeDiscord::start();
    discord(&home, &fake, json!({}));
    home.scripted("slow", "", json!({"load_state": {"async": true, "sleep_ms": 1500, "return": null}}));
    let mut first = GatewayProcess::start(
        home.path(),
        &["--enable-channel", "discord"],
        &[("BUB_DEBOUNCE_SECONDS", "0.2"), ("BUB_SHUTDOWN_GRACE_SECONDS", "20")],
    );
    fake.wait_for("a ready Gateway session", || fake.connected());
    let channels: Vec<String> = (1..=6).map(|n| format!("100{n}")).collect();
    fake.push_message(dm("1000", "U1", "before the stop"));
    fake.wait_for("the first turn running", || !fake.calls("POST /channels/1000/typing").is_empty());
    first.signal("TERM");
    first.wait_for_log("stopping: no new messages", Duration::from_secs(30), "the gateway stopping");
    for channel in &channels {
        fake.push_message(dm(channel, "U1", &format!("during the stop {channel}")));
    }
    let status = first.wait(Duration::from_secs(60)).expect("the gateway exits once its turn is done");
    assert!(status.success(), "{status}\n{}", first.log());
    assert_eq!(fake.posted("1000").len(), 1, "the turn running at the stop was answered");
    assert!(channels.iter().all(|c| fake.posted(c).is_empty()), "nothing answered after the stop began");
    // While it is down: only REST can read these.
    fake.push_message(dm("1001", "U1", "while down, first"));
    fake.push_message(dm("1001", "U1", "while down, second"));

    let second = gateway(&home, &fake);
    for channel in &channels {
        fake.wait_for(&format!("the answer in {channel}"), || !fake.posted(channel).is_empty());
        assert!(
            fake.posted(channel)[0].0.contains(&format!("during the stop {channel}")),
            "{:?}",
            fake.posted(channel)
        );
    }
    fake.wait_for("both messages sent while down answered", || {
        fake.posted("1001").iter().any(|(t, _)| t.contains("while down, second"))
    });
    // Each message answered once (quick ones of a channel may share a turn), in order.
    std::thread::sleep(Duration::from_millis(2000));
    for channel in channels.iter().chain(["1000".to_owned()].iter()) {
        let answers: Vec<String> = fake.posted(channel).into_iter().map(|(t, _)| t).collect();
        let all = answers.join("\n");
        let said = |text: &str| all.matches(text).count();
        let asked = if channel == "1000" { "before the stop".to_owned() } else { format!("during the stop {channel}") };
        assert_eq!(said(&asked), 1, "{channel}: {answers:?}");
    }
    let d1 = fake.posted("1001").into_iter().map(|(t, _)| t).collect::<Vec<_>>().join("\n");
    let at = |text: &str| d1.find(text).unwrap_or_else(|| panic!("{text} not answered: {d1}"));
    assert!(at("during the stop 1001") < at("while down, first") && at("while down, first") < at("while down, second"));
    assert_eq!(d1.matches("while down, first").count(), 1, "{d1}");
    println!("FAULT discord SIGTERM with 6 messages arriving in the grace and 2 while down: all answered once after the restart");
    drop(second);
}

/// Images of an active message reach the model as image parts; one over
/// `max_file_bytes` is not fetched; the CDN never gets the bot token, and
/// a URL on another host is not fetched at all.
#[test]
fn discord_attachments_become_media_parts_within_the_cap_without_the_token() {
    let home = Home::new();
    let provider = Provider::start(vec![chat::text("nice picture")]);
    home.use_model("openai:m", &provider.base_url, json!({}));
    let fake = FakeDiscord::start();
    let elsewhere = FakeDiscord::start();
    discord(&home, &fake, json!({"max_file_bytes": 1024}));
    let gateway = gateway(&home, &fake);
    let image = b"\x89PNG small";
    let attachment = |id: &str, name: &str, url: String, size: usize| json!({"id": id, "filename": name, "content_type": "image/png", "size": size, "url": url});
    let mut message = dm("1001", "U1", "");
    message["attachments"] = json!([
        attachment("A1", "small.png", fake.add_file("small.png", image), image.len()),
        attachment("A2", "big.png", fake.add_file("big.png", &[0u8; 4096]), 4096),
        attachment("A3", "away.png", elsewhere.add_file("away.png", image), image.len()),
    ]);
    fake.push_message(message);
    fake.wait_for("the reply", || !fake.posted("1001").is_empty());
    assert_eq!(fake.posted("1001")[0].0, "nice picture");
    assert_eq!(fake.file_requests(), vec![None], "one fetch (the small one), without Authorization");
    assert!(elsewhere.file_requests().is_empty(), "another host is not fetched");
    let request = provider.requests()[0].body.to_string();
    let data = base64::engine::general_purpose::STANDARD.encode(image);
    assert!(request.contains(&format!("data:image/png;base64,{data}")), "{request}");
    assert!(request.contains("[Attachment: small.png]") && request.contains("big.png"), "{request}");
    drop(gateway);
}

/// With `BUB_STREAM_OUTPUT=true` the reply is one message, posted at the
/// first text and edited as the model writes; the outbound completes it.
#[test]
fn discord_streamed_replies_are_edited_into_one_message() {
    let home = Home::new();
    let provider = Provider::start(vec![chat::text("streamed reply here")]);
    home.use_model("openai:m", &provider.base_url, json!({}));
    let fake = FakeDiscord::start();
    discord(&home, &fake, json!({"edit_interval_ms": 0}));
    let gateway = gateway_with(&home, &fake, &[("BUB_STREAM_OUTPUT", "true")]);
    fake.push_message(dm("1001", "U1", "stream it"));
    fake.wait_for("the reply edited to its full text", || {
        fake.posted("1001").first().is_some_and(|(t, _)| t == "streamed reply here")
    });
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(fake.posted("1001").len(), 1, "one message, edited: {:?}", fake.posted("1001"));
    let first = &fake.calls("POST /channels/1001/messages")[0].params["content"];
    assert!(first.as_str().is_some_and(|t| t.len() < "streamed reply here".len()), "posted at the first text: {first}");
    assert!(!fake.calls("PATCH /channels/1001/messages/").is_empty());
    drop(gateway);
}

/// A wrong token fails the start naming the variable; a bot without the
/// Message Content intent (close code 4014) gets a log line saying where
/// to enable it, and the gateway stays up.
#[test]
fn discord_a_wrong_token_or_a_refused_intent_says_what_to_fix() {
    let home = Home::new();
    let fake = FakeDiscord::start();
    discord(&home, &fake, json!({"token": "wrong"}));
    let mut refused = GatewayProcess::start(home.path(), &["--enable-channel", "discord"], &[]);
    let status = refused.wait(Duration::from_secs(30));
    let log = refused.log();
    assert!(log.contains("BUB_DISCORD_TOKEN") && log.contains("401"), "{status:?}\n{log}");

    discord(&home, &fake, json!({}));
    fake.refuse_content_intent();
    let gateway = GatewayProcess::start(home.path(), &["--enable-channel", "discord"], &[]);
    gateway.wait_for_log("Message Content Intent", Duration::from_secs(30), "the intent refusal explained");
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(fake.identifies().len(), 1, "no retry that cannot succeed");
    assert!(gateway.pid().is_some(), "the gateway is still up");
    drop(gateway);
}

/// `BUB_DISCORD_PROXY` carries both halves: the REST calls (plain http
/// here, so in absolute form) and the Gateway's WebSocket (a `CONNECT`
/// tunnel); a message is answered through it.
#[test]
fn discord_reaches_rest_and_the_gateway_through_an_http_proxy() {
    let home = Home::new();
    let fake = FakeDiscord::start();
    let proxy = Proxy::start();
    discord(&home, &fake, json!({}));
    let gateway = gateway_with(&home, &fake, &[("BUB_DISCORD_PROXY", proxy.url.as_str())]);
    fake.push_message(dm("1001", "U1", "through the proxy"));
    fake.wait_for("the reply", || !fake.posted("1001").is_empty());
    let asked = proxy.asked();
    let api = fake.api_base.trim_start_matches("http://");
    assert!(asked.iter().any(|l| l.starts_with("CONNECT 127.0.0.1:")), "the Gateway tunnelled: {asked:?}");
    assert!(asked.iter().any(|l| l.starts_with(&format!("GET http://{api}/gateway/bot"))), "{asked:?}");
    assert!(asked.iter().any(|l| l.starts_with(&format!("POST http://{api}/channels/1001/messages"))), "{asked:?}");
    drop(gateway);
}

/// The fake is only as good as its likeness to Discord: discord.py, the
/// most used Discord library (from PyPI, pinned), logs in, identifies,
/// gets READY, reads a direct message, replies to it, and resumes after a
/// dropped connection with what was dispatched meanwhile replayed, all
/// against the fake, as it does against Discord.
#[test]
fn the_fake_discord_is_what_discord_py_expects() {
    let Some(venv) = discord_client_venv_or_skip("the_fake_discord_is_what_discord_py_expects") else { return };
    // Discord's ids are snowflakes, and discord.py reads them as numbers.
    const DM: &str = "1100000000000000001";
    const PERSON: &str = "1100000000000000002";
    let fake = FakeDiscord::start();
    let script = r#"
import json, sys, discord, yarl
discord.http.Route.BASE = sys.argv[1]
# A client of one shard connects to Discord's usual Gateway address.
discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(sys.argv[3])
intents = discord.Intents.default()
intents.message_content = True
client = discord.Client(intents=intents)
out = {"messages": [], "resumed": 0}
@client.event
async def on_connect():  # READY parsed (on_ready waits for guilds)
    out["ready"] = {"id": str(client.user.id), "name": client.user.name}
@client.event
async def on_resumed():
    out["resumed"] += 1
@client.event
async def on_message(m):
    if m.author.id == client.user.id:
        return
    out["messages"].append({"id": str(m.id), "content": m.content, "channel": str(m.channel.id),
        "dm": m.guild is None, "author": m.author.name})
    if m.content == "ping":
        sent = await m.reply("pong", mention_author=False)
        out["reply"] = {"id": str(sent.id), "content": sent.content}
    if m.content == "bye":
        await client.close()
client.run(sys.argv[2], log_level=40)  # errors to stderr
print(json.dumps(out))
"#;
    let mut child = std::process::Command::new(venv.join("bin/python"))
        .args(["-c", script, &fake.api_base, TOKEN, &fake.gateway_url])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run discord.py");
    // Waits for `done`; a discord.py that ended or got stuck says why.
    let wait = |child: &mut std::process::Child, what: &str, done: &dyn Fn() -> bool| {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while !done() {
            let ended = child.try_wait().unwrap();
            if ended.is_some() || std::time::Instant::now() > deadline {
                let _ = child.kill();
                let mut stderr = String::new();
                std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut stderr).unwrap();
                panic!("no {what} from discord.py ({ended:?}):\n{stderr}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    wait(&mut child, "session", &|| fake.connected());
    let ping = fake.push_message(dm(DM, PERSON, "ping"));
    wait(&mut child, "reply", &|| !fake.posted(DM).is_empty());
    assert_eq!(fake.posted(DM), vec![("pong".to_owned(), Some(ping.clone()))]);
    fake.drop_connection();
    fake.push_message(dm(DM, PERSON, "while dropped"));
    wait(&mut child, "resume", &|| fake.resumes().len() == 1 && fake.connected());
    fake.push_message(dm(DM, PERSON, "bye"));
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        assert!(std::time::Instant::now() < deadline, "discord.py did not close");
        std::thread::sleep(Duration::from_millis(50));
    }
    let output = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    let out: Value = serde_json::from_str(stdout.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("{e}: {stdout}\n{}", String::from_utf8_lossy(&output.stderr)));
    assert_eq!(out["ready"], json!({"id": BOT_ID, "name": "bub_test"}));
    let contents: Vec<&str> =
        out["messages"].as_array().unwrap().iter().filter_map(|m| m["content"].as_str()).collect();
    assert_eq!(contents, ["ping", "while dropped", "bye"], "each once, the dropped one replayed: {out}");
    assert_eq!(out["messages"][0]["dm"], true);
    assert_eq!(out["reply"]["content"], "pong");
    assert_eq!(out["resumed"], 1);
    assert_eq!(fake.resumes()[0]["session_id"], "session-1");
    assert_eq!(fake.identifies().len(), 1, "resumed, not identified again");
}

/// One channel's slow work never holds another's messages: an attachment
/// whose download hangs, and a thread lookup Discord rate-limits for a
/// minute, each wait in their own channel while a direct message
/// elsewhere is answered at once; the hanging download is given up.
#[test]
fn discord_a_slow_channel_never_holds_another() {
    let home = Home::new();
    let fake = FakeDiscord::start();
    discord(&home, &fake, json!({}));
    let gateway = gateway(&home, &fake);
    let mut hanging = dm("1001", "U1", "look at this");
    hanging["attachments"] = json!([{"id": "1", "filename": "slow.png", "content_type": "image/png", "size": 1000,
        "url": fake.add_hung_file("slow.png")}]);
    fake.push_message(hanging);
    fake.wait_for("the hanging download begun", || !fake.file_requests().is_empty());
    fake.rate_limit_lookups(60.0, 4);
    fake.push_message(FakeDiscord::user_message("2001", Some("4001"), "U1", "chatter that needs a lookup"));
    fake.wait_for("the rate-limited lookup", || !fake.calls("GET /channels/2001").is_empty());
    let asked = std::time::Instant::now();
    fake.push_message(dm("1002", "U1", "quick one"));
    fake.wait_for("the quick answer", || !fake.posted("1002").is_empty());
    assert!(asked.elapsed() < Duration::from_secs(10), "answered after {:?}", asked.elapsed());
    assert!(fake.posted("1001").is_empty(), "the hanging one is still waiting for its download");
    fake.wait_for("the hanging message answered without its attachment", || !fake.posted("1001").is_empty());
    drop(gateway);
}

/// A Hello that names no heartbeat interval (`null`, `"x"`, a number
/// past any float) is refused: the channel connects again, with backoff,
/// rather than stay connected without heartbeats, and messages then
/// arrive.
#[test]
fn discord_a_hello_without_a_heartbeat_interval_is_refused_and_the_connection_made_again() {
    let home = Home::new();
    let fake = FakeDiscord::start();
    fake.bad_hellos(&[
        r#"{"op": 10, "d": {"heartbeat_interval": null}}"#,
        r#"{"op": 10, "d": {"heartbeat_interval": "x"}}"#,
        r#"{"op": 10, "d": {"heartbeat_interval": 1e400}}"#,
    ]);
    discord(&home, &fake, json!({}));
    let gateway = gateway(&home, &fake);
    assert!(fake.opened().len() >= 4, "three refused Hellos, then Discord's: {}", fake.opened().len());
    let gaps: Vec<Duration> = fake.opened().windows(2).map(|w| w[1] - w[0]).collect();
    assert!(gaps[1] >= Duration::from_millis(900), "backoff between attempts: {gaps:?}");
    assert!(gateway.log().contains("names no heartbeat interval"), "{}", gateway.log());
    fake.push_message(dm("1001", "U1", "after the bad hellos"));
    fake.wait_for("the answer", || !fake.posted("1001").is_empty());
    fake.wait_for("a heartbeat", || !fake.heartbeats().is_empty());
    drop(gateway);
}

/// Ids are a peer's word: a message whose channel id is a path
/// (`../../users/@me`) is never made into a request carrying the token.
#[test]
fn discord_ids_that_are_not_snowflakes_never_reach_a_request() {
    let home = Home::new();
    let fake = FakeDiscord::start();
    discord(&home, &fake, json!({}));
    let gateway = gateway(&home, &fake);
    fake.push_message(dm("../../users/@me", "U1", "where does this go"));
    fake.push_message(dm("1001", "U1", "and this"));
    fake.wait_for("the ordinary answer", || !fake.posted("1001").is_empty());
    std::thread::sleep(Duration::from_millis(1500));
    let strays: Vec<_> =
        fake.calls("").into_iter().filter(|c| c.method.contains("users/@me/") || c.method.contains("..")).collect();
    assert!(strays.is_empty(), "a request went off its channel: {strays:?}");
    assert!(gateway.log().contains("is not a Discord id"), "{}", gateway.log());
    drop(gateway);
}

/// The first message of a new conversation with a listed person, sent
/// while the gateway was down, has no cursor to be read back from: the
/// channel finds the person's direct-message channel at READY and reads
/// it back.
#[test]
fn discord_a_listed_persons_new_dm_sent_while_down_is_read_back() {
    const PERSON: &str = "1100000000000000002";
    let home = Home::new();
    let fake = FakeDiscord::start();
    fake.dm_channel(PERSON, "1005");
    fake.push_message(dm("1005", PERSON, "hello while you were down"));
    discord(&home, &fake, json!({"allow_users": PERSON}));
    let gateway = gateway(&home, &fake);
    fake.wait_for("the read-back answer", || !fake.posted("1005").is_empty());
    assert!(fake.posted("1005")[0].0.contains("hello while you were down"), "{:?}", fake.posted("1005"));
    assert_eq!(fake.calls("POST /users/@me/channels").len(), 1);
    drop(gateway);
}

/// A message taken, then read back after a `kill -9` that came before its
/// cursor moved, runs once: its key is kept with the session's tape.
#[test]
fn discord_a_message_read_back_after_a_kill_runs_once() {
    let home = Home::new();
    let fake = FakeDiscord::start();
    discord(&home, &fake, json!({}));
    let mut first = gateway(&home, &fake);
    let id: u64 = fake.push_message(dm("1001", "U1", "only once please")).parse().unwrap();
    fake.wait_for("the answer", || !fake.posted("1001").is_empty());
    first.signal("KILL");
    first.wait(Duration::from_secs(10));
    // As if the kill came before the cursor moved past the message.
    let cursors = home.path().join("data/discord-channel/cursors.json");
    let mut saved: Value = serde_json::from_slice(&std::fs::read(&cursors).unwrap()).unwrap();
    saved["1001"]["after"] = json!((id - 1).to_string());
    std::fs::write(&cursors, saved.to_string()).unwrap();
    let second = gateway(&home, &fake);
    second.wait_for_log("delivered again", Duration::from_secs(60), "the read-back's repeat recognised");
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(fake.posted("1001").len(), 1, "answered once: {:?}", fake.posted("1001"));
    drop(second);
}
