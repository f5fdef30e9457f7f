//! `bub run MESSAGE` with steering messages already waiting in the scope's
//! inbox for the session, and with the media items of `BUBDIFF_MEDIA` (a
//! JSON list of `{type, mime_type, url}`) on the inbound: the bub-rs side
//! of the differential scenarios "steering messages pending" and "media
//! turn" (`scripts/differential.py`). Home from
//! `BUB_HOME`, workspace = the current directory; prints the outbounds as
//! `bub run` does.
//!
//! `steer_run MESSAGE [STEERED…]`

use bub_host::WithBuiltin as _;
use bub_host::{discovery::SearchPath, framework::Framework, kit::envelope::complete_channel_message, HostBuilder};
use serde_json::{json, Map, Value};

fn message(content: &str) -> Value {
    let mut m = json!({"session_id": "cli:local", "content": content, "channel": "cli", "chat_id": "local",
        "context": {"sender_id": "human"}});
    if let Value::Object(map) = &mut m {
        complete_channel_message(map);
    }
    m
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let home = std::path::PathBuf::from(std::env::var("BUB_HOME").expect("BUB_HOME"));
    let ws = std::env::current_dir().unwrap();
    let host = HostBuilder::new()
        .settings(bub_host::RuntimeSettings::from_env())
        .home(&home)
        .workspace(&ws)
        .builtin()
        .discovered(&SearchPath::new(&home, None))
        .build();
    let fw = Framework::new(&host, &ws);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let result = rt.block_on(fw.scoped(|fw| async move {
        for text in &args[1..] {
            let mut state = Map::new();
            assert!(fw.steer_message(message(text), "cli:local", &mut state, None).await?);
        }
        let mut inbound = message(&args[0]);
        if let Ok(media) = std::env::var("BUBDIFF_MEDIA") {
            inbound["media"] = serde_json::from_str(&media).expect("BUBDIFF_MEDIA is a JSON list");
        }
        fw.process_inbound(&mut inbound, false).await
    }));
    match result {
        Ok(turn) => {
            for outbound in turn.outbounds {
                println!("[cli:local]\n{}", outbound["content"].as_str().unwrap_or_default());
            }
        }
        Err(e) => {
            eprintln!("error: the turn failed: {e}");
            std::process::exit(1);
        }
    }
}
