//! A channel's HTTP answers read under a cap: a network peer (the
//! platform, a proxy, a self-hosted server) can send an endless body, and
//! reading it whole would grow the gateway until it aborts.

/// Why an answer could not be read.
#[derive(Debug)]
pub enum ReadError {
    /// It passed the cap; the message says how large it got.
    TooLarge(String),
    /// The connection failed while reading.
    Network(reqwest::Error),
}

/// `response`'s body, refused once it passes `limit` bytes.
pub async fn read_capped(response: &mut reqwest::Response, limit: u64) -> Result<Vec<u8>, ReadError> {
    let mut body = crate::channel::CappedBody::new(limit);
    while let Some(chunk) = response.chunk().await.map_err(ReadError::Network)? {
        body.push(&chunk).map_err(ReadError::TooLarge)?;
    }
    Ok(body.into_bytes())
}
