//! Server-sent events as the streaming provider APIs (and Switchboard's own streamed invoke) send them, read incrementally from the
//! body's chunks: `event:`, `data:` and `id:` fields, one event per blank line, comments (`:`) and
//! other fields ignored, several `data:` lines joined by a newline. Lines may end in `\n` or `\r\n`,
//! and a chunk may end anywhere, inside a line or a UTF-8 character.

/// One event: its name (empty when the server named none), its data, and its own `id:` if it
/// had one (Switchboard's event stream numbers its events so).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    pub event: String,
    pub data: String,
    pub id: Option<String>,
}

/// The most an event may hold before the stream counts as malformed.
const MAX_EVENT_BYTES: usize = 4 << 20;

#[derive(Debug, Default)]
pub struct SseReader {
    /// Bytes of a line not yet ended.
    line: Vec<u8>,
    event: String,
    data: String,
    id: Option<String>,
    has_data: bool,
}

impl SseReader {
    /// Reads `chunk`; the events it completed, in order.
    pub fn push(&mut self, chunk: &[u8]) -> Result<Vec<SseEvent>, String> {
        let mut done = Vec::new();
        for &b in chunk {
            if b != b'\n' {
                self.line.push(b);
                if self.line.len() + self.data.len() > MAX_EVENT_BYTES {
                    return Err(format!("an event longer than {MAX_EVENT_BYTES} bytes"));
                }
                continue;
            }
            let mut line = std::mem::take(&mut self.line);
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            let line = String::from_utf8(line).map_err(|_| "a line that is not UTF-8".to_owned())?;
            if line.is_empty() {
                if self.has_data {
                    done.push(SseEvent {
                        event: std::mem::take(&mut self.event),
                        data: std::mem::take(&mut self.data),
                        id: self.id.take(),
                    });
                }
                self.event.clear();
                self.id = None;
                self.has_data = false;
                continue;
            }
            let (field, value) = match line.split_once(':') {
                Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
                None => (line.as_str(), ""),
            };
            match field {
                "event" => value.clone_into(&mut self.event),
                "id" => self.id = Some(value.to_owned()),
                "data" => {
                    if self.has_data {
                        self.data.push('\n');
                    }
                    self.data.push_str(value);
                    self.has_data = true;
                }
                _ => {}
            }
        }
        Ok(done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_in(chunks: &[&[u8]]) -> Vec<SseEvent> {
        let mut r = SseReader::default();
        chunks.iter().flat_map(|c| r.push(c).unwrap()).collect()
    }

    fn ev(event: &str, data: &str) -> SseEvent {
        SseEvent { event: event.into(), data: data.into(), id: None }
    }

    #[test]
    fn an_events_id_comes_with_it_and_not_with_the_next() {
        let got = read_in(&[b"id: 7
event: a
data: x

data: y

"]);
        assert_eq!(got, vec![SseEvent { id: Some("7".into()), ..ev("a", "x") }, ev("", "y")]);
    }

    #[test]
    fn events_split_anywhere_read_the_same() {
        let whole = "event: message_start\r\ndata: {\"a\":\"é\"}\r\n\r\n: keep-alive\n\ndata: one\ndata: two\n\ndata: [DONE]\n\n";
        let expected = vec![ev("message_start", "{\"a\":\"é\"}"), ev("", "one\ntwo"), ev("", "[DONE]")];
        assert_eq!(read_in(&[whole.as_bytes()]), expected);
        let bytes = whole.as_bytes();
        for at in 1..bytes.len() {
            assert_eq!(read_in(&[&bytes[..at], &bytes[at..]]), expected, "split at byte {at}");
        }
    }

    #[test]
    fn an_unfinished_event_is_not_given_and_bad_bytes_are_an_error() {
        assert_eq!(read_in(&[b"data: half"]), vec![]);
        assert!(SseReader::default().push(b"data: \xff\n").is_err());
        let mut r = SseReader::default();
        let long = vec![b'x'; MAX_EVENT_BYTES + 1];
        assert!(r.push(&long).is_err());
    }
}
