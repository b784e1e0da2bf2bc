//! A small HTTP/1.1 server: one request per connection (`Connection: close`), a bounded head
//! and body, `Expect: 100-continue` answered. The node's listener (`/health`, `/ready`,
//! `/metrics`, the console) and `sluice connect`'s REST API serve through it.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The largest request head read.
const HEAD_BYTES_MAX: usize = 8 * 1024;
/// How long a client has to send its head, and then its body.
const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// A request, as the listener read it.
pub struct Request {
    pub method: String,
    /// The path, still percent-encoded (a segment may hold an encoded `/`).
    pub path: String,
    pub query: Vec<(String, String)>,
    /// Header names in lower case.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Request {
    /// A header's value by its lower-case name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }

    /// A query parameter's value.
    pub fn query(&self, name: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }
}

/// An answer.
pub struct Response {
    pub status: u16,
    pub content_type: &'static str,
    /// Headers beyond Content-Type, Content-Length and Connection.
    pub headers: Vec<(&'static str, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub fn new(status: u16, content_type: &'static str, body: Vec<u8>) -> Response {
        Response {
            status,
            content_type,
            headers: Vec::new(),
            body,
        }
    }

    pub fn text(status: u16, body: &str) -> Response {
        Response::new(status, "text/plain", body.as_bytes().to_vec())
    }
}

/// Serves `handler` on every connection `listener` accepts, until the task is dropped. A body
/// over `body_bytes_max` is answered 413 without being read.
pub async fn serve<H, F>(listener: TcpListener, body_bytes_max: usize, handler: H)
where
    H: Fn(Request) -> F + Send + Sync + 'static,
    F: Future<Output = Response> + Send + 'static,
{
    let handler = Arc::new(handler);
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let handler = Arc::clone(&handler);
        tokio::spawn(async move {
            let mut stream = stream;
            let response = match read_request(&mut stream, body_bytes_max).await {
                Ok(Some(request)) => handler(request).await,
                Ok(None) => return,
                Err(response) => response,
            };
            write_response(&mut stream, &response).await;
        });
    }
}

/// Reads one request: `Ok(None)` when the client went away or was too slow, `Err` with the
/// answer for a request refused before its body.
async fn read_request(
    stream: &mut TcpStream,
    body_bytes_max: usize,
) -> Result<Option<Request>, Response> {
    let mut head = Vec::with_capacity(1024);
    let mut buffer = [0u8; 4096];
    let read = tokio::time::timeout(READ_TIMEOUT, async {
        while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < HEAD_BYTES_MAX {
            match stream.read(&mut buffer).await {
                Ok(0) | Err(_) => return false,
                Ok(n) => head.extend_from_slice(&buffer[..n]),
            }
        }
        true
    })
    .await;
    if !matches!(read, Ok(true)) {
        return Ok(None);
    }
    let Some(head_end) = head
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|at| at + 4)
    else {
        return Err(Response::text(431, "request head too large\n"));
    };
    let mut body = head.split_off(head_end);
    let head_text = String::from_utf8_lossy(&head).into_owned();
    let mut lines = head_text.lines();
    let request_line = lines.next().unwrap_or_default();
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_owned()))
        .collect();
    let mut words = request_line.split_whitespace();
    let method = words.next().unwrap_or("").to_owned();
    let target = words.next().unwrap_or("");
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let header = |name: &str| {
        headers
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    };
    if header("transfer-encoding").is_some_and(|value| !value.eq_ignore_ascii_case("identity")) {
        return Err(Response::text(
            411,
            "chunked request bodies are not read: send Content-Length\n",
        ));
    }
    let content_length = match header("content-length").map(str::parse::<usize>) {
        None => 0,
        Some(Ok(length)) => length,
        Some(Err(_)) => return Err(Response::text(400, "Content-Length is not a number\n")),
    };
    if content_length > body_bytes_max {
        return Err(Response::text(
            413,
            &format!("request body over {body_bytes_max} bytes\n"),
        ));
    }
    if body.len() < content_length
        && header("expect").is_some_and(|value| value.eq_ignore_ascii_case("100-continue"))
        && stream
            .write_all(b"HTTP/1.1 100 Continue\r\n\r\n")
            .await
            .is_err()
    {
        return Ok(None);
    }
    let body_read = tokio::time::timeout(READ_TIMEOUT, async {
        while body.len() < content_length {
            match stream.read(&mut buffer).await {
                Ok(0) | Err(_) => break,
                Ok(n) => body.extend_from_slice(&buffer[..n]),
            }
        }
    })
    .await;
    if body_read.is_err() || body.len() < content_length {
        return Ok(None);
    }
    body.truncate(content_length);
    Ok(Some(Request {
        method,
        path: path.to_owned(),
        query: parse_query(query),
        headers,
        body,
    }))
}

async fn write_response(stream: &mut TcpStream, response: &Response) {
    let mut head = format!(
        "HTTP/1.1 {}\r\nContent-Type: {}\r\nContent-Length: {}\r\n",
        status_line(response.status),
        response.content_type,
        response.body.len()
    );
    for (name, value) in &response.headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("Connection: close\r\n\r\n");
    if stream.write_all(head.as_bytes()).await.is_ok() {
        let _ = stream.write_all(&response.body).await;
    }
    let _ = stream.shutdown().await;
}

/// `200 OK` and its kin.
pub fn status_line(status: u16) -> String {
    let reason = match status {
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        204 => "No Content",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        409 => "Conflict",
        411 => "Length Required",
        413 => "Payload Too Large",
        415 => "Unsupported Media Type",
        422 => "Unprocessable Entity",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "",
    };
    format!("{status} {reason}")
}

/// `%xx` sequences decoded (and `+` kept: paths are not form data); invalid UTF-8 replaced.
pub fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let (Some(high), Some(low)) = (hex(bytes[i + 1]), hex(bytes[i + 2]))
        {
            out.push((high * 16 + low) as u8);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A query string's pairs, decoded (`+` is a space there).
pub fn parse_query(query: &str) -> Vec<(String, String)> {
    query
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            (
                percent_decode(&key.replace('+', " ")),
                percent_decode(&value.replace('+', " ")),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_and_queries_are_decoded() {
        assert_eq!(percent_decode("my%20group%2Fa"), "my group/a");
        assert_eq!(percent_decode("100%"), "100%");
        assert_eq!(percent_decode("%zz%4"), "%zz%4");
        assert_eq!(
            parse_query("from=offset&offset=42&q=a+b%26c&flag"),
            vec![
                ("from".to_owned(), "offset".to_owned()),
                ("offset".to_owned(), "42".to_owned()),
                ("q".to_owned(), "a b&c".to_owned()),
                ("flag".to_owned(), String::new()),
            ]
        );
    }

    #[tokio::test]
    async fn a_request_with_expect_continue_is_answered_and_its_body_read() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let server = tokio::spawn(serve(listener, 16, |request: Request| async move {
            Response::new(200, "text/plain", request.body)
        }));
        let mut stream = TcpStream::connect(addr).await.expect("connect");
        stream
            .write_all(b"PUT /x HTTP/1.1\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n")
            .await
            .expect("write head");
        let mut interim = [0u8; 25];
        stream.read_exact(&mut interim).await.expect("100");
        assert_eq!(&interim, b"HTTP/1.1 100 Continue\r\n\r\n");
        stream.write_all(b"hello").await.expect("write body");
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.expect("answer");
        assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
        assert!(answer.ends_with("\r\n\r\nhello"), "{answer}");

        let mut stream = TcpStream::connect(addr).await.expect("connect");
        stream
            .write_all(b"POST /x HTTP/1.1\r\nContent-Length: 17\r\n\r\n")
            .await
            .expect("write head");
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.expect("answer");
        assert!(answer.starts_with("HTTP/1.1 413 "), "{answer}");
        server.abort();
    }
}
