//! A JSON value read as a Rust type, except that a struct is read only from a JSON object. Serde's
//! derived structs also accept an array of their fields in order, so `"modelConfig": [0.5]`
//! would be a temperature; a client that sends that has made a mistake, and is told so with the
//! field's pointer. Everything else reads as `serde_json` reads it.

use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, IntoDeserializer, MapAccess, SeqAccess, Unexpected, Visitor};
use serde_json::{Map, Value};

/// `value` as a deserializer that refuses an array for a struct, at any depth.
pub(crate) struct Strict(pub Value);

impl<'de> Deserializer<'de> for Strict {
    type Error = serde_json::Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        match self.0 {
            Value::Object(map) => visitor.visit_map(Fields::new(map)),
            Value::Array(items) => visitor.visit_seq(Items(items.into_iter())),
            scalar => scalar.deserialize_any(visitor),
        }
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        match self.0 {
            Value::Array(_) => Err(de::Error::invalid_type(Unexpected::Seq, &"a JSON object")),
            other => Strict(other).deserialize_any(visitor),
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        match self.0 {
            Value::Null => visitor.visit_none(),
            other => visitor.visit_some(Strict(other)),
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        // Unit variants as strings and externally tagged ones as `serde_json` reads them.
        self.0.deserialize_enum(name, variants, visitor)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf unit
        unit_struct seq tuple tuple_struct map identifier ignored_any
    }
}

/// Reads `T` only from a JSON object, as a field's `deserialize_with`: for the internally tagged
/// enums a client writes (`"onFailure": {"action": "none"}`), which serde also reads from an array
/// whose first item is the tag (`["none"]`), wherever they are read from (the API, a bundle, a
/// stored record).
pub(crate) fn object<'de, D: Deserializer<'de>, T: serde::Deserialize<'de>>(d: D) -> Result<T, D::Error> {
    /// Reads `T` from a map only, through the caller's own map access (so that a path-tracking
    /// deserializer still names the member at fault: `/onLimit/action`).
    struct ObjectOnly<T>(std::marker::PhantomData<T>);

    impl<'de, T: serde::Deserialize<'de>> Visitor<'de> for ObjectOnly<T> {
        type Value = T;

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a JSON object")
        }

        fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
            T::deserialize(de::value::MapAccessDeserializer::new(map))
        }
    }

    d.deserialize_map(ObjectOnly(std::marker::PhantomData))
}

/// Reads `T` from the members of an internally tagged object whose `tag` member must be one of
/// `variants` (`{"type": "webhook", "url": ...}`), the others read by `T` whatever the tag, through
/// the caller's own map access: serde's derived tagged enums buffer the object first, so an error
/// inside it was told at the object's pointer (`/handler`); read so, it is told at its member's
/// (`/handler/signature`). For an enum of one variant, or whose variants share one shape.
///
/// Gives the tag's value with what was read, for `T` to be told which variant it is.
pub(crate) fn tagged<'de, A, T>(
    map: A,
    tag: &'static str,
    variants: &'static [&'static str],
) -> Result<(String, T), A::Error>
where
    A: MapAccess<'de>,
    T: serde::Deserialize<'de>,
{
    let mut members = WithoutTag { map, tag, variants, seen: None };
    let read = T::deserialize(de::value::MapAccessDeserializer::new(&mut members))?;
    match members.seen {
        Some(variant) => Ok((variant, read)),
        None => Err(de::Error::missing_field(tag)),
    }
}

/// The members of a map but its tag, which is checked on the way.
struct WithoutTag<A> {
    map: A,
    tag: &'static str,
    variants: &'static [&'static str],
    /// The tag's value, once read.
    seen: Option<String>,
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for &mut WithoutTag<A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, mut seed: K) -> Result<Option<K::Value>, Self::Error> {
        loop {
            // The key is handed on while the caller's map access reads it, so that an unknown
            // member is told at its own pointer.
            match self.map.next_key_seed(MemberOrTag { seed, tag: self.tag })? {
                None => return Ok(None),
                Some(MemberKey::Member(key)) => return Ok(Some(key)),
                Some(MemberKey::Tag(unused)) => seed = unused,
            }
            if self.seen.is_some() {
                return Err(de::Error::duplicate_field(self.tag));
            }
            // Checked while it is read, so that the error is told at the tag's pointer.
            self.seen = Some(self.map.next_value_seed(Variant(self.variants))?);
        }
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Self::Error> {
        self.map.next_value_seed(seed)
    }
}

/// A member's key read by `seed`, or the tag, which gives the seed back unused.
enum MemberKey<K, S> {
    Member(K),
    Tag(S),
}

struct MemberOrTag<S> {
    seed: S,
    tag: &'static str,
}

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for MemberOrTag<S> {
    type Value = MemberKey<S::Value, S>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        let key = String::deserialize(d)?;
        if key == self.tag {
            return Ok(MemberKey::Tag(self.seed));
        }
        self.seed.deserialize(IntoDeserializer::<D::Error>::into_deserializer(key)).map(MemberKey::Member)
    }
}

/// A tag that must be one of these.
struct Variant(&'static [&'static str]);

impl<'de> DeserializeSeed<'de> for Variant {
    type Value = String;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<String, D::Error> {
        let found = String::deserialize(d)?;
        match self.0.contains(&found.as_str()) {
            true => Ok(found),
            false => Err(de::Error::unknown_variant(&found, self.0)),
        }
    }
}

/// An object's members, each value read strictly.
struct Fields {
    members: serde_json::map::IntoIter,
    value: Option<Value>,
}

impl Fields {
    fn new(map: Map<String, Value>) -> Self {
        Self { members: map.into_iter(), value: None }
    }
}

impl<'de> MapAccess<'de> for Fields {
    type Error = serde_json::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>, Self::Error> {
        let Some((key, value)) = self.members.next() else { return Ok(None) };
        self.value = Some(value);
        seed.deserialize(key.into_deserializer()).map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Self::Error> {
        let value = self.value.take().ok_or_else(|| de::Error::custom("a value was asked for before its key"))?;
        seed.deserialize(Strict(value))
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.members.len())
    }
}

/// An array's items, each read strictly.
struct Items(std::vec::IntoIter<Value>);

impl<'de> SeqAccess<'de> for Items {
    type Error = serde_json::Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<Option<T::Value>, Self::Error> {
        self.0.next().map(|item| seed.deserialize(Strict(item))).transpose()
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.0.len())
    }
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;
    use serde_json::json;

    use super::*;

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(rename_all = "camelCase", deny_unknown_fields)]
    struct Outer {
        name: String,
        #[serde(default)]
        config: Option<Inner>,
        #[serde(default)]
        list: Vec<Inner>,
        #[serde(default)]
        tags: Vec<String>,
    }

    #[derive(Debug, Deserialize, PartialEq)]
    struct Inner {
        temperature: f32,
    }

    fn read(v: Value) -> Result<Outer, String> {
        serde_path_to_error::deserialize::<_, Outer>(Strict(v)).map_err(|e| {
            let path = e.path().to_string();
            format!("{path}: {}", e.into_inner())
        })
    }

    #[test]
    fn an_array_for_a_struct_is_refused_at_any_depth_with_its_path() {
        assert_eq!(serde_json::from_value::<Inner>(json!([0.5])).unwrap().temperature, 0.5, "serde alone accepts it");
        let e = read(json!({ "name": "a", "config": [0.5] })).unwrap_err();
        assert!(e.starts_with("config: invalid type: sequence, expected a JSON object"), "{e}");
        let e = read(json!({ "name": "a", "list": [{ "temperature": 0.1 }, [0.5]] })).unwrap_err();
        assert!(e.starts_with("list[1]: invalid type: sequence"), "{e}");
        assert!(read(json!(["a"])).unwrap_err().contains("expected a JSON object"));
    }

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(tag = "action", rename_all = "snake_case")]
    enum Tagged {
        Stop,
        Say { text: String },
    }

    #[derive(Debug, Deserialize, PartialEq)]
    struct Holder {
        #[serde(deserialize_with = "object")]
        then: Tagged,
    }

    #[test]
    fn an_internally_tagged_enum_is_read_only_from_an_object_where_a_field_says_so() {
        assert_eq!(serde_json::from_value::<Tagged>(json!(["stop"])).unwrap(), Tagged::Stop, "serde alone accepts it");
        let read = |v| serde_path_to_error::deserialize::<_, Holder>(Strict(v)).map_err(|e| e.to_string());
        assert_eq!(
            read(json!({ "then": { "action": "say", "text": "hi" } })).unwrap().then,
            Tagged::Say { text: "hi".into() }
        );
        for wrong in [json!(["stop"]), json!("stop"), json!(null), json!(1)] {
            let e = read(json!({ "then": wrong })).unwrap_err();
            assert!(e.starts_with("then: invalid type:") && e.ends_with("expected a JSON object"), "{e}");
        }
        let e = read(json!({ "then": { "action": "sing" } })).unwrap_err();
        assert!(e.starts_with("then.action: unknown variant `sing`"), "{e}");
    }

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Hook {
        url: String,
        #[serde(default)]
        retries: u8,
    }

    #[derive(Debug, PartialEq)]
    struct Handler(Hook);

    impl<'de> Deserialize<'de> for Handler {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct Members;
            impl<'de> Visitor<'de> for Members {
                type Value = Handler;
                fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                    f.write_str("a JSON object")
                }
                fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Handler, A::Error> {
                    tagged(map, "type", &["webhook"]).map(|(_, hook)| Handler(hook))
                }
            }
            d.deserialize_map(Members)
        }
    }

    #[derive(Debug, Deserialize, PartialEq)]
    struct Tool {
        handler: Handler,
    }

    #[test]
    fn a_tagged_objects_members_are_named_by_their_own_pointer() {
        let read = |v| serde_path_to_error::deserialize::<_, Tool>(Strict(v)).map_err(|e| e.to_string());
        let ok = read(json!({ "handler": { "url": "u", "type": "webhook" } })).unwrap();
        assert_eq!(ok.handler, Handler(Hook { url: "u".into(), retries: 0 }));
        let e = read(json!({ "handler": { "type": "webhook", "url": "u", "retries": "many" } })).unwrap_err();
        assert!(e.starts_with("handler.retries: invalid type: string"), "{e}");
        let e = read(json!({ "handler": { "type": "lambda", "url": "u" } })).unwrap_err();
        assert!(e.starts_with("handler.type: unknown variant `lambda`, expected `webhook`"), "{e}");
        let e = read(json!({ "handler": { "type": "webhook", "url": "u", "colour": 1 } })).unwrap_err();
        assert!(e.starts_with("handler.colour: unknown field `colour`"), "{e}");
        let e = read(json!({ "handler": { "url": "u" } })).unwrap_err();
        assert!(e.starts_with("handler: missing field `type`"), "{e}");
        let e = read(json!({ "handler": ["webhook", "u"] })).unwrap_err();
        assert!(e.starts_with("handler: invalid type: sequence, expected a JSON object"), "{e}");
    }

    #[test]
    fn objects_arrays_options_and_unknown_fields_read_as_serde_json_reads_them() {
        let ok = read(json!({ "name": "a", "config": null, "list": [{ "temperature": 0.1 }], "tags": ["x"] }));
        let want =
            Outer { name: "a".into(), config: None, list: vec![Inner { temperature: 0.1 }], tags: vec!["x".into()] };
        assert_eq!(ok.unwrap(), want);
        let e = read(json!({ "name": "a", "colour": 1 })).unwrap_err();
        assert!(e.contains("unknown field `colour`"), "{e}");
        let e = read(json!({ "name": 7 })).unwrap_err();
        assert!(e.starts_with("name: invalid type: integer `7`, expected a string"), "{e}");
    }
}
