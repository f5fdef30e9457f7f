//! An MCP server for the `mcp` plugin's tests. `bub-mcp-test-server`
//! speaks MCP on stdio; `bub-mcp-test-server --http 127.0.0.1:0` serves
//! streamable HTTP at `/mcp` and prints its address on the first line.
//! Tools: `echo {text}`, `add {a, b}`, `fail {}` (an error result),
//! `picture {}` (text, an image and an embedded resource),
//! `get_env {}` (the server's environment, one `KEY=value` a line, as the
//! reference `everything` server's `get-env`).

use rmcp::{
    handler::server::{router::tool::ToolRouter, wrapper::Parameters},
    model::{CallToolResult, ContentBlock, ServerCapabilities, ServerConfig},
    schemars, tool, tool_handler, tool_router, ServerHandler, ServiceExt,
};

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
struct EchoRequest {
    /// The text to send back.
    text: String,
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
struct AddRequest {
    a: f64,
    b: f64,
}

#[derive(Debug, Clone)]
struct TestServer {
    tool_router: ToolRouter<Self>,
}

#[tool_router]
impl TestServer {
    fn new() -> Self {
        TestServer { tool_router: Self::tool_router() }
    }

    #[tool(description = "Send the text back")]
    fn echo(&self, Parameters(EchoRequest { text }): Parameters<EchoRequest>) -> String {
        format!("echo: {text}")
    }

    #[tool(description = "Add two numbers")]
    fn add(&self, Parameters(AddRequest { a, b }): Parameters<AddRequest>) -> String {
        (a + b).to_string()
    }

    #[tool(description = "The server's environment variables")]
    fn get_env(&self) -> String {
        let mut vars: Vec<String> = std::env::vars().map(|(k, v)| format!("{k}={v}")).collect();
        vars.sort();
        vars.join("\n")
    }

    #[tool(description = "A picture with a caption and an embedded note")]
    fn picture(&self) -> CallToolResult {
        CallToolResult::success(vec![
            ContentBlock::text("a red dot"),
            ContentBlock::image(
                "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==",
                "image/png",
            ),
            ContentBlock::embedded_text("note://1", "remember the dot"),
        ])
    }

    #[tool(description = "Always fails")]
    fn fail(&self) -> CallToolResult {
        CallToolResult::error(vec![ContentBlock::text("this tool always fails")])
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for TestServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    if let Some(at) = args.iter().position(|a| a == "--http") {
        use rmcp::transport::streamable_http_server::{session::local::LocalSessionManager, StreamableHttpService};
        let address = args.get(at + 1).map(String::as_str).unwrap_or("127.0.0.1:0");
        let service: StreamableHttpService<TestServer, LocalSessionManager> =
            StreamableHttpService::new(|| Ok(TestServer::new()), Default::default(), Default::default());
        let router = axum::Router::new().nest_service("/mcp", service);
        let listener = tokio::net::TcpListener::bind(address).await?;
        println!("{}", listener.local_addr()?);
        axum::serve(listener, router).await?;
        return Ok(());
    }
    let service = TestServer::new().serve(rmcp::transport::stdio()).await?;
    service.waiting().await?;
    Ok(())
}
