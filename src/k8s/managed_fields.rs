//! `managedFields` taken out of the API server's JSON before it is decoded.
//!
//! What kube lacks (kube 4.2.0, https://docs.rs/kube/4.2.0): a way to skip `managedFields` while
//! decoding; delete this when its client can decode without them (or the API server omits them).
//!
//! Why: no code of this crate reads managedFields (the API server's record of which field
//! manager set which field), yet every object the API server sends carries them — every watch
//! event, list item and answer to a write, and every object an admission review holds. Their
//! `fieldsV1` are trees of short keys that serde decodes into `serde_json::Value` maps: a
//! B-tree node and a string per key, allocated and freed for nothing (a large share of the
//! manager's allocations in the benchmark). Dropping them after decoding (as the caches also do) saves the memory, not that work.
//!
//! How: the text `"managedFields":[` right after a `{` or `,` can only be an object's key
//! (inside a JSON string every `"` is escaped, so the key's closing quote cannot be there), and
//! its array ends at the `]` that closes it, counted outside strings. The array becomes `null`,
//! which decodes to `None` as if the field were absent; everything else passes unchanged, as
//! slices of the bytes received (no copy). A write built from an object read this way leaves
//! managedFields out, and the API server then keeps the ones it has. JSON formatted with spaces
//! around the colon is passed on as it is (the API server sends compact JSON).

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::{Bytes, BytesMut};
use http_body::{Body, Frame};
use memchr::memmem;

/// The key and the start of its array, as the API server writes them.
const NEEDLE: &[u8] = b"\"managedFields\":[";
/// What the array is replaced with.
const NULL: &[u8] = b"null";

/// Where the scanner is inside a dropped array.
#[derive(Debug, Default, Clone, Copy)]
struct InArray {
    /// Brackets and braces open, the array's own included.
    depth: u32,
    in_string: bool,
    escaped: bool,
}

impl InArray {
    /// Reads `data` on from `from`; the index of the array's closing `]`, if it is there.
    fn end_in(&mut self, data: &[u8], from: usize) -> Option<usize> {
        let mut i = from;
        while i < data.len() {
            if self.in_string {
                if self.escaped {
                    self.escaped = false;
                    i += 1;
                    continue;
                }
                // The string's end or its next escape: most bytes of a key are neither.
                match memchr::memchr2(b'"', b'\\', &data[i..]) {
                    Some(at) => {
                        i += at;
                        if data[i] == b'"' {
                            self.in_string = false;
                        } else {
                            self.escaped = true;
                        }
                    }
                    None => return None,
                }
            } else {
                match data[i] {
                    b'"' => self.in_string = true,
                    b'[' | b'{' => self.depth += 1,
                    b']' | b'}' => {
                        self.depth -= 1;
                        if self.depth == 0 {
                            return Some(i);
                        }
                    }
                    _ => {}
                }
            }
            i += 1;
        }
        None
    }
}

/// Takes a JSON text in pieces, as it arrives, and passes it on without managedFields.
pub struct Scanner {
    finder: memmem::Finder<'static>,
    /// The end of the last piece, held back because it may be the start of the key.
    held: Vec<u8>,
    /// The byte before `held` (or before the next piece): what a key found at the start of
    /// the next piece follows.
    before: u8,
    /// Inside an array being dropped.
    dropping: Option<InArray>,
}

impl Default for Scanner {
    fn default() -> Self {
        Scanner {
            finder: memmem::Finder::new(NEEDLE),
            held: Vec::new(),
            before: 0,
            dropping: None,
        }
    }
}

impl Scanner {
    /// Takes the next piece; gives `out` what to pass on, in order (never an empty piece).
    pub fn feed(&mut self, piece: Bytes, out: &mut impl FnMut(Bytes)) {
        let data = if self.held.is_empty() {
            piece
        } else {
            let mut joined = BytesMut::with_capacity(self.held.len() + piece.len());
            joined.extend_from_slice(&self.held);
            joined.extend_from_slice(&piece);
            self.held.clear();
            joined.freeze()
        };
        // Bytes from `pass_from` on are still to be passed on; keys are looked for from
        // `search_from` on (past a match that was no key).
        let mut pass_from = 0;
        if let Some(array) = self.dropping.take() {
            match self.after_array(array, &data, 0) {
                Some(next) => pass_from = next,
                None => return,
            }
        }
        let mut search_from = pass_from;
        while let Some(found) = self.finder.find(&data[search_from..]) {
            let at = search_from + found;
            let before = if at == 0 { self.before } else { data[at - 1] };
            if before != b'{' && before != b',' {
                search_from = at + 1;
                continue;
            }
            let open = at + NEEDLE.len() - 1;
            emit(out, data.slice(pass_from..open));
            out(Bytes::from_static(NULL));
            match self.after_array(InArray::default(), &data, open) {
                Some(next) => (pass_from, search_from) = (next, next),
                None => return,
            }
        }
        // The rest passes but for a tail that may be the start of the next key (a tail past
        // `search_from`, since a whole key was not found there).
        let keep_until = data.len() - held_tail(&data[search_from..]);
        emit(out, data.slice(pass_from..keep_until));
        if keep_until > 0 {
            self.before = data[keep_until - 1];
        }
        self.held.extend_from_slice(&data[keep_until..]);
    }

    /// Reads a dropped array on from `from`: the index after its end, or `None` when it goes
    /// on into the next piece (then kept in `dropping`; a piece that starts inside an array
    /// never needs `before`, since no key is looked for before the array's end).
    fn after_array(&mut self, mut array: InArray, data: &[u8], from: usize) -> Option<usize> {
        let end = array.end_in(data, from);
        if end.is_none() {
            self.dropping = Some(array);
        }
        end.map(|end| end + 1)
    }

    /// The end of the text: what is still held back.
    pub fn finish(&mut self, out: &mut impl FnMut(Bytes)) {
        if !self.held.is_empty() {
            out(Bytes::from(std::mem::take(&mut self.held)));
        }
    }
}

fn emit(out: &mut impl FnMut(Bytes), piece: Bytes) {
    if !piece.is_empty() {
        out(piece);
    }
}

/// How many of `data`'s last bytes are the start of [`NEEDLE`] (and so must wait for the
/// next piece), at most all but its last byte.
fn held_tail(data: &[u8]) -> usize {
    let longest = data.len().min(NEEDLE.len() - 1);
    (1..=longest)
        .rev()
        .find(|&len| data[data.len() - len..] == NEEDLE[..len])
        .unwrap_or(0)
}

/// A whole JSON text without managedFields: borrowed when it had none.
pub fn without_managed_fields(text: Bytes) -> Bytes {
    let mut scanner = Scanner::default();
    let mut pieces: Vec<Bytes> = Vec::new();
    scanner.feed(text.clone(), &mut |piece| pieces.push(piece));
    scanner.finish(&mut |piece| pieces.push(piece));
    match pieces.as_slice() {
        [] => Bytes::new(),
        [one] => one.clone(),
        _ => {
            let mut joined = BytesMut::with_capacity(text.len());
            for piece in &pieces {
                joined.extend_from_slice(piece);
            }
            joined.freeze()
        }
    }
}

pin_project_lite::pin_project! {
    /// A response body without managedFields (see the module docs).
    pub struct WithoutManagedFields<B> {
        #[pin]
        inner: B,
        scanner: Scanner,
        ready: VecDeque<Bytes>,
        trailers: Option<Frame<Bytes>>,
        ended: bool,
    }
}

impl<B> WithoutManagedFields<B> {
    pub fn new(inner: B) -> Self {
        WithoutManagedFields {
            inner,
            scanner: Scanner::default(),
            ready: VecDeque::new(),
            trailers: None,
            ended: false,
        }
    }
}

impl<B> Body for WithoutManagedFields<B>
where
    B: Body<Data = Bytes>,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let mut this = self.project();
        loop {
            if let Some(piece) = this.ready.pop_front() {
                return Poll::Ready(Some(Ok(Frame::data(piece))));
            }
            if let Some(trailers) = this.trailers.take() {
                return Poll::Ready(Some(Ok(trailers)));
            }
            if *this.ended {
                return Poll::Ready(None);
            }
            let ready = &mut *this.ready;
            match ready!(this.inner.as_mut().poll_frame(cx)) {
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => this.scanner.feed(data, &mut |piece| ready.push_back(piece)),
                    Err(trailers) => {
                        this.scanner.finish(&mut |piece| ready.push_back(piece));
                        *this.trailers = Some(trailers);
                    }
                },
                Some(Err(err)) => return Poll::Ready(Some(Err(err))),
                None => {
                    this.scanner.finish(&mut |piece| ready.push_back(piece));
                    *this.ended = true;
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.ended && self.ready.is_empty() && self.trailers.is_none()
    }
}

/// A response of the API server with managedFields taken out of its body; its length is then
/// no longer known. Every body is scanned: this client asks only for JSON, without compression
/// (no Accept-Encoding), and reads no other kind of body (no pod logs, no protobuf).
pub fn response<B>(response: http::Response<B>) -> http::Response<WithoutManagedFields<B>> {
    let (mut parts, body) = response.into_parts();
    parts.headers.remove(http::header::CONTENT_LENGTH);
    http::Response::from_parts(parts, WithoutManagedFields::new(body))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    /// Feeds `text` cut at `cuts` and joins what comes out.
    fn scan_in_pieces(text: &[u8], cuts: &[usize]) -> Vec<u8> {
        let mut scanner = Scanner::default();
        let mut out = Vec::new();
        let mut push = |piece: Bytes| {
            assert!(!piece.is_empty(), "no empty piece is passed on");
            out.extend_from_slice(&piece);
        };
        let mut from = 0;
        for &cut in cuts.iter().chain([text.len()].iter()) {
            scanner.feed(Bytes::copy_from_slice(&text[from..cut]), &mut push);
            from = cut;
        }
        scanner.finish(&mut push);
        out
    }

    fn pod_with_managed_fields() -> Value {
        json!({
            "kind": "Pod",
            "metadata": {
                "name": "p",
                "managedFields": [
                    {"manager": "kube-controller-manager", "operation": "Update",
                     "fieldsType": "FieldsV1",
                     "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:a": {}}},
                                  "f:spec": {"f:containers": {"k:{\"name\":\"main\"}": {
                                      ".": {}, "f:args": {}}}}}},
                    {"manager": "kwok", "operation": "Update", "subresource": "status",
                     "fieldsV1": {"f:status": {"f:conditions": {"k:{\"type\":\"Ready\"}": {}}}}}
                ],
                "labels": {"a": "b"}
            },
            "spec": {"containers": [{"name": "main", "args": ["]", "}", "\\", "\"managedFields\":["]}]}
        })
    }

    fn expected_without(mut value: Value) -> Value {
        fn null_managed_fields(value: &mut Value) {
            match value {
                Value::Object(map) => {
                    for (key, field) in map.iter_mut() {
                        if key == "managedFields" {
                            *field = Value::Null;
                        } else {
                            null_managed_fields(field);
                        }
                    }
                }
                Value::Array(items) => items.iter_mut().for_each(null_managed_fields),
                _ => {}
            }
        }
        null_managed_fields(&mut value);
        value
    }

    #[test]
    fn managed_fields_become_null_at_any_cut_and_nothing_else_changes() {
        // A watch stream's lines: two events, the second a list item's worth of nesting.
        let pod = pod_with_managed_fields();
        let event = json!({"type": "ADDED", "object": pod});
        let list = json!({"kind": "PodList", "items": [pod, {"metadata": {"name": "q"}}]});
        let text = format!("{event}\n{list}\n");
        let text = text.as_bytes();
        let expected = format!(
            "{}\n{}\n",
            expected_without(event.clone()),
            expected_without(list.clone())
        );
        for cut in 0..=text.len() {
            for second in [cut, (cut + 7).min(text.len()), (cut + 40).min(text.len())] {
                let out = scan_in_pieces(text, &[cut, second.max(cut)]);
                assert_eq!(
                    String::from_utf8(out).unwrap(),
                    expected,
                    "cut at {cut} and {second}"
                );
            }
        }
    }

    #[test]
    fn the_key_inside_a_string_or_a_longer_key_is_not_touched() {
        for text in [
            r#"{"a":"\"managedFields\":[1]","b":2}"#,
            r#"{"x\"managedFields":[1],"b":2}"#,
            r#"{"xmanagedFields":[1]}"#,
            r#"{"managedFields": [1]}"#,
            r#"{"managedFields":null}"#,
        ] {
            assert_eq!(
                scan_in_pieces(text.as_bytes(), &[]),
                text.as_bytes(),
                "{text}"
            );
        }
    }

    #[test]
    fn an_empty_array_and_one_at_the_end_of_an_object_become_null() {
        assert_eq!(
            scan_in_pieces(br#"{"managedFields":[],"a":{"managedFields":[{}]}}"#, &[]),
            br#"{"managedFields":null,"a":{"managedFields":null}}"#
        );
    }

    #[test]
    fn a_text_without_the_key_is_passed_on_as_the_same_bytes() {
        let text = Bytes::from_static(br#"{"metadata":{"name":"p"}}"#);
        let out = without_managed_fields(text.clone());
        assert_eq!(out, text);
        assert_eq!(out.as_ptr(), text.as_ptr(), "not copied");
    }

    #[test]
    fn a_decoded_object_has_no_managed_fields_and_the_rest_of_its_metadata() {
        let text = Bytes::from(pod_with_managed_fields().to_string());
        let pod: k8s_openapi::api::core::v1::Pod =
            serde_json::from_slice(&without_managed_fields(text)).unwrap();
        assert_eq!(pod.metadata.managed_fields, None);
        assert_eq!(pod.metadata.name.as_deref(), Some("p"));
        assert_eq!(pod.metadata.labels.unwrap()["a"], "b");
        let args = pod.spec.unwrap().containers[0].args.clone().unwrap();
        assert_eq!(args, ["]", "}", "\\", "\"managedFields\":["]);
    }
}
