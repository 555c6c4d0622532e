//! The applier: the one way controllers write to the API server. It holds the client and the
//! controller's field manager, and turns the API server's answers into outcomes a controller
//! can act on — "already exists", "gone", "replaced by a newer incarnation", "refused as
//! invalid" — so no controller matches HTTP status codes itself.

use std::fmt::Debug;

use k8s_openapi::NamespaceResourceScope;
use kube::{
    Api, Client, Resource, ResourceExt,
    api::{DeleteParams, Patch, PatchParams, PostParams, Preconditions, PropagationPolicy},
    core::Request,
};
use serde::{
    Deserialize, Serialize,
    de::{DeserializeOwned, IgnoredAny},
};
use serde_json::Value;
use thiserror::Error;

use super::error::{Categorized, Category};

/// A write or read the API server did not accept.
#[derive(Debug, Error)]
#[error("{action}: {source}")]
pub struct ApiError {
    /// What we were doing, e.g. "creating StatefulSet demo/lws-0".
    pub action: String,
    /// The client's error.
    #[source]
    pub source: kube::Error,
}

/// What an API error means for the controller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// 404: the object is not there.
    NotFound,
    /// 409: it exists already, or a precondition (uid, resourceVersion) no longer holds.
    Conflict,
    /// 400/422: the API server refuses the content; only a change of the spec can help.
    Refused(String),
    /// Anything else: the network, the API server, a timeout, a permission.
    Transient,
}

/// Classifies a client error.
pub fn classify(err: &kube::Error) -> Failure {
    match err {
        kube::Error::Api(status) => match status.code {
            404 => Failure::NotFound,
            409 => Failure::Conflict,
            400 | 422 => Failure::Refused(status.message.clone()),
            _ => Failure::Transient,
        },
        _ => Failure::Transient,
    }
}

impl ApiError {
    /// What the failure means.
    pub fn failure(&self) -> Failure {
        classify(&self.source)
    }

    /// A status write found its object gone (deleted since the reconcile read it): nothing is
    /// left to report on, so this is no failure.
    pub fn status_of_deleted_object(&self) -> bool {
        self.failure() == Failure::NotFound && self.action.starts_with(PATCHING_STATUS)
    }

    /// The API server's message when it refused the object's content.
    pub fn refused(&self) -> Option<String> {
        match self.failure() {
            Failure::Refused(message) => Some(message),
            _ => None,
        }
    }
}

impl Categorized for ApiError {
    fn category(&self) -> Category {
        match self.failure() {
            Failure::Refused(_) => Category::Spec,
            _ => Category::Transient,
        }
    }

    fn object_gone(&self) -> bool {
        self.status_of_deleted_object()
    }
}

/// The result of a create-if-absent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Created {
    /// We created it; its uid (for a delete that must not reach a successor of that name).
    Created(Option<String>),
    /// An object of that name was already there (ours or not: the caller checks).
    AlreadyExists,
}

/// The result of a delete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deleted {
    /// Deletion started.
    Deleted,
    /// Nothing of that name was there.
    Gone,
    /// The name now belongs to a newer incarnation (the uid precondition failed): left alone.
    Replaced,
}

/// How a delete treats what the object owns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Propagation {
    /// The API server's default for the kind.
    Default,
    /// The object stays (with a deletionTimestamp) until its dependents are gone.
    Foreground,
    /// Dependents are collected after the object is gone.
    Background,
}

/// Writes with one field manager.
#[derive(Clone)]
pub struct Applier {
    client: Client,
    field_manager: &'static str,
}

/// Kinds the applier writes: namespaced, typed objects.
pub trait Object:
    Resource<DynamicType = (), Scope = NamespaceResourceScope>
    + Clone
    + Debug
    + Serialize
    + DeserializeOwned
    + Send
    + Sync
    + 'static
{
}

impl<K> Object for K where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + Debug
        + Serialize
        + DeserializeOwned
        + Send
        + Sync
        + 'static
{
}

/// What a write's answer is read for: the object's uid and resourceVersion as stored. The API
/// server answers a write with the whole object (an LWS: its spec with two pod templates, its
/// status), and the controllers read only these two fields of it; decoded into this, the rest is
/// parsed and skipped without an allocation.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stored {
    /// `metadata.uid`.
    pub uid: Option<String>,
    /// `metadata.resourceVersion`: when a cache shows it, the cache has the write.
    pub resource_version: Option<String>,
}

impl<'de> Deserialize<'de> for Stored {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Answer {
            #[serde(default)]
            metadata: Meta,
        }
        #[derive(Default, Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Meta {
            uid: Option<String>,
            resource_version: Option<String>,
        }
        let answer = Answer::deserialize(deserializer)?;
        Ok(Self {
            uid: answer.metadata.uid,
            resource_version: answer.metadata.resource_version,
        })
    }
}

/// Sends a request built for `K`'s URL in `namespace` and decodes its answer as `R`: what the
/// caller reads of it ([`Stored`], or `IgnoredAny` for nothing) instead of the whole object the
/// API server answers a write with. Errors are the client's, as through `Api`: a refused write
/// is `kube::Error::Api` with the API server's status.
pub async fn send<K, R>(
    client: &Client,
    namespace: &str,
    verb: &'static str,
    build: impl FnOnce(&Request) -> Result<http::Request<Vec<u8>>, kube::core::request::Error>,
) -> Result<R, kube::Error>
where
    K: Resource<DynamicType = ()>,
    R: DeserializeOwned,
{
    let mut request = build(&Request::new(K::url_path(&(), Some(namespace))))
        .map_err(kube::Error::BuildRequest)?;
    // The verb names the client's span, as `Api`'s own methods do.
    request.extensions_mut().insert(verb);
    client.request::<R>(request).await
}

/// The action of a status write, as [`ApiError::action`] starts.
const PATCHING_STATUS: &str = "patching the status of";

fn describe<K: Object>(verb: &str, namespace: &str, name: &str) -> String {
    format!("{verb} {} {namespace}/{name}", K::kind(&()))
}

impl Applier {
    /// An applier writing as `field_manager`.
    pub fn new(client: Client, field_manager: &'static str) -> Self {
        Self {
            client,
            field_manager,
        }
    }

    /// The client, for reads.
    pub fn client(&self) -> &Client {
        &self.client
    }

    fn api<K: Object>(&self, namespace: &str) -> Api<K> {
        Api::namespaced(self.client.clone(), namespace)
    }

    fn post_params(&self) -> PostParams {
        PostParams {
            field_manager: Some(self.field_manager.into()),
            ..Default::default()
        }
    }

    /// Creates `obj` unless an object of its name exists. Used for what is created once and
    /// never updated (revisions, worker StatefulSets, Services that must not take over a
    /// user's object of the same name).
    pub async fn create_if_absent<K: Object>(&self, obj: &K) -> Result<Created, ApiError> {
        let namespace = obj.namespace().unwrap_or_default();
        let created = match serde_json::to_vec(obj) {
            Ok(body) => {
                send::<K, Stored>(&self.client, &namespace, "create", |r| {
                    r.create(&self.post_params(), body)
                })
                .await
            }
            Err(err) => Err(kube::Error::SerdeError(err)),
        };
        match created {
            Ok(created) => Ok(Created::Created(created.uid)),
            Err(err) if classify(&err) == Failure::Conflict => Ok(Created::AlreadyExists),
            Err(source) => Err(ApiError {
                action: describe::<K>("creating", &namespace, &obj.name_any()),
                source,
            }),
        }
    }

    /// Server-side applies `obj`, taking over the fields it names from other managers (the
    /// plan already decided the object is ours). The body escapes what the API server's YAML
    /// reader of apply bodies would refuse or change ([`super::apply_body`]).
    pub async fn apply<K: Object>(&self, obj: &K) -> Result<Stored, ApiError> {
        self.apply_with(obj, true).await
    }

    /// Server-side applies `obj` without taking over fields another manager set to other
    /// values: the API server answers 409 instead. Used to create what the cache does not
    /// show without first reading whether someone else's object has that name.
    pub async fn apply_unforced<K: Object>(&self, obj: &K) -> Result<Stored, ApiError> {
        self.apply_with(obj, false).await
    }

    async fn apply_with<K: Object>(&self, obj: &K, force: bool) -> Result<Stored, ApiError> {
        let namespace = obj.namespace().unwrap_or_default();
        let name = obj.name_any();
        let action = || describe::<K>("applying", &namespace, &name);
        let body = super::apply_body::apply_body(obj).map_err(|e| ApiError {
            action: action(),
            source: kube::Error::SerdeError(serde_json::Error::io(std::io::Error::other(
                e.to_string(),
            ))),
        })?;
        let params = PatchParams::apply(self.field_manager);
        let params = if force { params.force() } else { params };
        send::<K, Stored>(&self.client, &namespace, "patch", |r| {
            r.patch(&name, &params, &Patch::Apply(&body))
        })
        .await
        .map_err(|source| ApiError {
            action: action(),
            source,
        })
    }

    /// Deletes `name`. With `uid`, only that incarnation: a successor of the same name is
    /// never deleted on the strength of a cache that is a moment behind.
    pub async fn delete<K: Object>(
        &self,
        namespace: &str,
        name: &str,
        uid: Option<&str>,
        propagation: Propagation,
    ) -> Result<Deleted, ApiError> {
        let params = DeleteParams {
            propagation_policy: match propagation {
                Propagation::Default => None,
                Propagation::Foreground => Some(PropagationPolicy::Foreground),
                Propagation::Background => Some(PropagationPolicy::Background),
            },
            preconditions: uid.map(|uid| Preconditions {
                uid: Some(uid.to_string()),
                resource_version: None,
            }),
            ..Default::default()
        };
        let deleted = send::<K, IgnoredAny>(&self.client, namespace, "delete", |r| {
            r.delete(name, &params)
        })
        .await;
        match deleted {
            Ok(_) => Ok(Deleted::Deleted),
            Err(err) => match classify(&err) {
                Failure::NotFound => Ok(Deleted::Gone),
                Failure::Conflict if uid.is_some() => Ok(Deleted::Replaced),
                _ => Err(ApiError {
                    action: describe::<K>("deleting", namespace, name),
                    source: err,
                }),
            },
        }
    }

    /// Merge-patches `status` into the status subresource.
    pub async fn patch_status<K: Object>(
        &self,
        namespace: &str,
        name: &str,
        status: &impl Serialize,
    ) -> Result<(), ApiError> {
        let body = serde_json::json!({ "status": status });
        self.merge_patch_status::<K>(namespace, name, &body)
            .await
            .map(|_| ())
    }

    /// Merge-patches the status subresource with a whole body (e.g. carrying
    /// `metadata.resourceVersion`, which makes the write fail with a conflict when the object
    /// changed since it was read). Returns the version written (it tells a controller when its
    /// cache has caught up, see `k8s::written`).
    pub async fn merge_patch_status<K: Object>(
        &self,
        namespace: &str,
        name: &str,
        body: &Value,
    ) -> Result<Stored, ApiError> {
        send::<K, Stored>(&self.client, namespace, "patch_status", |r| {
            r.patch_subresource("status", name, &PatchParams::default(), &Patch::Merge(body))
        })
        .await
        .map_err(|source| ApiError {
            action: describe::<K>(PATCHING_STATUS, namespace, name),
            source,
        })
    }

    /// Merge-patches the object itself (metadata or spec fields a controller owns by
    /// convention, e.g. an annotation).
    pub async fn merge_patch<K: Object>(
        &self,
        namespace: &str,
        name: &str,
        patch: &Value,
    ) -> Result<(), ApiError> {
        let params = PatchParams {
            field_manager: Some(self.field_manager.into()),
            ..Default::default()
        };
        send::<K, IgnoredAny>(&self.client, namespace, "patch", |r| {
            r.patch(name, &params, &Patch::Merge(patch))
        })
        .await
        .map(|_| ())
        .map_err(|source| ApiError {
            action: describe::<K>("patching", namespace, name),
            source,
        })
    }

    /// Applies an RFC 6902 JSON patch (a user's object, where only the fields we add may
    /// change; a `test` operation in the patch makes a stale one fail instead of overwriting).
    pub async fn json_patch<K: Object>(
        &self,
        namespace: &str,
        name: &str,
        patch: json_patch::Patch,
    ) -> Result<(), ApiError> {
        let params = PatchParams {
            field_manager: Some(self.field_manager.into()),
            ..Default::default()
        };
        send::<K, IgnoredAny>(&self.client, namespace, "patch", |r| {
            r.patch(name, &params, &Patch::<()>::Json(patch))
        })
        .await
        .map(|_| ())
        .map_err(|source| ApiError {
            action: describe::<K>("patching", namespace, name),
            source,
        })
    }

    /// A fresh read, for the few facts a cache may not hold or may hold stale.
    pub async fn get_opt<K: Object>(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<K>, ApiError> {
        self.api::<K>(namespace)
            .get_opt(name)
            .await
            .map_err(|source| ApiError {
                action: describe::<K>("reading", namespace, name),
                source,
            })
    }
}

/// The no-op check: true when every field of `desired` is already in `observed` with the same
/// value. Objects may hold more keys (defaults, other managers' fields, status); lists must
/// have the same length and match element by element. Applying `desired` — which always names
/// the same set of fields — then changes nothing, and the write can be skipped. Anything else
/// (a value differs, a list grew or shrank, a quantity the API server canonicalised) is a
/// difference.
pub fn already_applied(desired: &Value, observed: &Value) -> bool {
    match (desired, observed) {
        (Value::Object(want), Value::Object(have)) => want.iter().all(|(k, v)| match have.get(k) {
            Some(h) => already_applied(v, h),
            None => is_empty(v),
        }),
        (Value::Array(want), Value::Array(have)) => {
            want.len() == have.len() && want.iter().zip(have).all(|(w, h)| already_applied(w, h))
        }
        // An empty desired object or list the API server dropped is no difference either.
        (want, Value::Null) => is_empty(want),
        (want, have) => want == have,
    }
}

fn is_empty(v: &Value) -> bool {
    match v {
        Value::Object(o) => o.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Null => true,
        _ => false,
    }
}

/// `{"status": …}`: the merge patch that turns the stored status `old` (none: the default)
/// into `new`.
pub fn status_patch<S: Serialize + Default>(old: Option<&S>, new: &S) -> Value {
    let old = match old {
        Some(o) => serde_json::to_value(o),
        None => serde_json::to_value(S::default()),
    }
    .unwrap_or_default();
    let new = serde_json::to_value(new).unwrap_or_default();
    serde_json::json!({ "status": merge_patch_between(&old, &new) })
}

/// The JSON merge patch (RFC 7386) that turns `old` into `new`: changed keys with their new
/// values, removed keys as `null` (a plain serialisation of `new` would leave fields that went
/// away in place).
pub fn merge_patch_between(old: &Value, new: &Value) -> Value {
    match (old, new) {
        (Value::Object(o), Value::Object(n)) => {
            let mut patch = serde_json::Map::new();
            for (k, v) in n {
                match o.get(k) {
                    Some(ov) if ov == v => {}
                    Some(ov) => {
                        patch.insert(k.clone(), merge_patch_between(ov, v));
                    }
                    None => {
                        patch.insert(k.clone(), v.clone());
                    }
                }
            }
            for k in o.keys() {
                if !n.contains_key(k) {
                    patch.insert(k.clone(), Value::Null);
                }
            }
            Value::Object(patch)
        }
        _ => new.clone(),
    }
}

/// The controller that owns `obj` (the uid of its controller owner reference).
pub fn controller_uid<K: Resource>(obj: &K) -> Option<&str> {
    obj.owner_references()
        .iter()
        .find(|o| o.controller == Some(true))
        .map(|o| o.uid.as_str())
}

/// The kind of the controller that owns `obj` (its controller owner reference's kind).
pub fn controller_kind<K: Resource>(obj: &K) -> Option<&str> {
    obj.owner_references()
        .iter()
        .find(|o| o.controller == Some(true))
        .map(|o| o.kind.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::ObjectMeta;
    use serde_json::json;

    /// A client whose "API server" answers every request with `code` and a Status body, the
    /// way kube-apiserver does.
    fn answering(code: u16) -> Client {
        let service =
            tower::service_fn(move |_req: http::Request<kube::client::Body>| async move {
                let body = json!({
                    "kind": "Status", "apiVersion": "v1", "status": "Failure",
                    "message": format!("answer {code}"),
                    "reason": if code == 404 { "NotFound" } else { "Test" }, "code": code,
                });
                Ok::<_, std::convert::Infallible>(
                    http::Response::builder()
                        .status(code)
                        .header("content-type", "application/json")
                        .body(kube::client::Body::from(body.to_string().into_bytes()))
                        .unwrap(),
                )
            });
        Client::new(service, "default")
    }

    fn config_map() -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some("cm".into()),
                namespace: Some("ns".into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    /// A client whose "API server" answers every request with a whole stored object, and the
    /// requests it got (method and path with query).
    fn storing() -> (Client, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let log = seen.clone();
        let service = tower::service_fn(move |req: http::Request<kube::client::Body>| {
            log.lock()
                .unwrap()
                .push(format!("{} {}", req.method(), req.uri()));
            async move {
                let body = json!({
                    "apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "cm", "namespace": "ns", "uid": "uid-7",
                        "resourceVersion": "42", "labels": {"a": "b"},
                        "managedFields": [{"manager": "test", "fieldsV1": {"f:data": {}}}]},
                    "data": {"key": "value"},
                });
                Ok::<_, std::convert::Infallible>(
                    http::Response::builder()
                        .status(200)
                        .header("content-type", "application/json")
                        .body(kube::client::Body::from(body.to_string().into_bytes()))
                        .unwrap(),
                )
            }
        });
        (Client::new(service, "default"), seen)
    }

    #[tokio::test]
    async fn writes_read_the_uid_and_version_of_the_answer() {
        let (client, seen) = storing();
        let applier = Applier::new(client, "test");
        let cm = config_map();
        assert_eq!(
            applier.create_if_absent(&cm).await.unwrap(),
            Created::Created(Some("uid-7".into()))
        );
        let stored = Stored {
            uid: Some("uid-7".into()),
            resource_version: Some("42".into()),
        };
        assert_eq!(applier.apply(&cm).await.unwrap(), stored);
        assert_eq!(
            applier
                .merge_patch_status::<ConfigMap>("ns", "cm", &json!({}))
                .await
                .unwrap(),
            stored
        );
        applier
            .merge_patch::<ConfigMap>("ns", "cm", &json!({}))
            .await
            .unwrap();
        assert_eq!(
            applier
                .delete::<ConfigMap>("ns", "cm", None, Propagation::Default)
                .await
                .unwrap(),
            Deleted::Deleted
        );
        assert_eq!(
            *seen.lock().unwrap(),
            [
                "POST /api/v1/namespaces/ns/configmaps?&fieldManager=test",
                "PATCH /api/v1/namespaces/ns/configmaps/cm?&force=true&fieldManager=test",
                "PATCH /api/v1/namespaces/ns/configmaps/cm/status?",
                "PATCH /api/v1/namespaces/ns/configmaps/cm?&fieldManager=test",
                "DELETE /api/v1/namespaces/ns/configmaps/cm?",
            ]
        );
    }

    #[tokio::test]
    async fn api_answers_map_to_outcomes() {
        let cm = config_map();
        let conflict = Applier::new(answering(409), "test");
        assert_eq!(
            conflict.create_if_absent(&cm).await.unwrap(),
            Created::AlreadyExists
        );
        assert_eq!(
            conflict
                .delete::<ConfigMap>("ns", "cm", Some("uid-1"), Propagation::Foreground)
                .await
                .unwrap(),
            Deleted::Replaced,
            "a failed uid precondition means a successor holds the name"
        );
        assert!(
            conflict
                .delete::<ConfigMap>("ns", "cm", None, Propagation::Default)
                .await
                .is_err(),
            "a conflict without a precondition is an error"
        );

        let gone = Applier::new(answering(404), "test");
        assert_eq!(
            gone.delete::<ConfigMap>("ns", "cm", None, Propagation::Default)
                .await
                .unwrap(),
            Deleted::Gone
        );
        assert_eq!(gone.get_opt::<ConfigMap>("ns", "cm").await.unwrap(), None);
        // A status write to an object deleted meanwhile is no failure; another 404 still is.
        let status = gone
            .patch_status::<ConfigMap>("ns", "cm", &json!({}))
            .await
            .unwrap_err();
        assert!(status.object_gone(), "{status}");
        let patch = gone
            .merge_patch::<ConfigMap>("ns", "cm", &json!({}))
            .await
            .unwrap_err();
        assert!(!patch.object_gone(), "{patch}");

        let invalid = Applier::new(answering(422), "test");
        let err = invalid.apply(&cm).await.unwrap_err();
        assert_eq!(err.refused().as_deref(), Some("answer 422"));
        assert_eq!(err.category(), Category::Spec);
        assert!(
            err.to_string().starts_with("applying ConfigMap ns/cm: "),
            "{err}"
        );

        let down = Applier::new(answering(503), "test");
        let err = down.create_if_absent(&cm).await.unwrap_err();
        assert_eq!(err.failure(), Failure::Transient);
        assert_eq!(err.category(), Category::Transient);
    }

    #[test]
    fn merge_patches_remove_what_went_away() {
        let old = json!({"a": 1, "b": {"c": 2, "d": 3}, "e": [1]});
        let new = json!({"a": 1, "b": {"c": 5}, "e": [2], "f": true});
        assert_eq!(
            merge_patch_between(&old, &new),
            json!({"b": {"c": 5, "d": null}, "e": [2], "f": true})
        );
    }

    #[test]
    fn applied_means_every_desired_field_is_there() {
        let observed = json!({"a": 1, "b": {"c": [1, 2], "d": "x"}, "status": {}});
        assert!(already_applied(&json!({"b": {"c": [1, 2]}}), &observed));
        assert!(!already_applied(&json!({"b": {"c": [1]}}), &observed));
        assert!(!already_applied(&json!({"a": 2}), &observed));
        assert!(already_applied(&json!({"e": {}}), &observed));
        assert!(!already_applied(&json!({"e": 0}), &observed));
    }

    #[test]
    fn defaults_and_extra_fields_do_not_count() {
        let desired = json!({"spec": {"replicas": 3, "template": {"spec": {"containers": [
            {"name": "c", "image": "i:1"}]}}}});
        let observed = json!({"metadata": {"uid": "u"}, "spec": {"replicas": 3,
            "revisionHistoryLimit": 10, "template": {"spec": {"containers": [
            {"name": "c", "image": "i:1", "imagePullPolicy": "IfNotPresent"}]}}},
            "status": {"replicas": 3}});
        assert!(already_applied(&desired, &observed));
    }

    #[test]
    fn a_changed_value_or_list_length_means_apply() {
        let desired = json!({"spec": {"replicas": 3, "env": [{"name": "A"}]}});
        assert!(!already_applied(
            &desired,
            &json!({"spec": {"replicas": 2, "env": [{"name": "A"}]}})
        ));
        assert!(!already_applied(
            &desired,
            &json!({"spec": {"replicas": 3, "env": [{"name": "A"}, {"name": "B"}]}})
        ));
        assert!(!already_applied(
            &desired,
            &json!({"spec": {"replicas": 3, "env": [{"name": "B"}]}})
        ));
        assert!(!already_applied(
            &desired,
            &json!({"spec": {"env": [{"name": "A"}]}})
        ));
    }

    #[test]
    fn empty_objects_the_server_dropped_are_equal() {
        assert!(already_applied(
            &json!({"a": {}, "b": [], "c": 1}),
            &json!({"c": 1})
        ));
        assert!(already_applied(&json!({"a": {}}), &json!({"a": null})));
        assert!(
            !already_applied(&json!({"a": 0}), &json!({})),
            "a scalar is never empty"
        );
    }
}
