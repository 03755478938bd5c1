"""Tests for BlobStore: URL parsing, atomic round trips, and keys that must never escape the root."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from worker_agent.storage import (
    BlobNotFoundError,
    BlobStore,
    StorageError,
    encode_component,
    join_key,
    parse_store_url,
)


def test_from_url_accepts_file_urls_and_absolute_paths(tmp_path: Path) -> None:
    """file:///abs and /abs name the same root, and .url reopens it."""
    by_url = BlobStore.from_url(tmp_path.as_uri())
    by_path = BlobStore.from_url(str(tmp_path))
    assert tmp_path == by_url.root
    assert tmp_path == by_path.root
    assert by_url == BlobStore.from_url(by_url.url)


def test_from_url_decodes_percent_escapes_in_file_urls(tmp_path: Path) -> None:
    """A root with spaces survives the as_uri/from_url round trip."""
    root = tmp_path / "with space"
    assert root == BlobStore.from_url(root.as_uri()).root


@pytest.mark.parametrize("url", ["gs://bucket/x", "s3://bucket", "http://host/x"])
def test_from_url_rejects_other_schemes_by_name(url: str) -> None:
    """An unsupported scheme is a ValueError that names the scheme."""
    with pytest.raises(ValueError, match=repr(url.split(":")[0])):
        BlobStore.from_url(url)


@pytest.mark.parametrize("url", ["relative/path", "", "file://remotehost/x", "file:relative"])
def test_from_url_rejects_relative_and_remote_paths(url: str) -> None:
    """Only absolute local paths are stores."""
    with pytest.raises(ValueError):
        parse_store_url(url)


def test_put_get_exists_delete_round_trip(blob_store: BlobStore) -> None:
    """A stored blob reads back byte for byte, can be replaced, and deleting it twice is fine."""
    assert not blob_store.exists("jobs/j1/fn")
    blob_store.put("jobs/j1/fn", b"first")
    blob_store.put("jobs/j1/fn", b"second\x00bytes")
    assert blob_store.exists("jobs/j1/fn")
    assert blob_store.get("jobs/j1/fn") == b"second\x00bytes"
    blob_store.delete("jobs/j1/fn")
    blob_store.delete("jobs/j1/fn")
    assert not blob_store.exists("jobs/j1/fn")


def test_get_missing_blob_says_missing_and_where(blob_store: BlobStore) -> None:
    """A missing blob raises BlobNotFoundError naming the key and the file looked for."""
    with pytest.raises(BlobNotFoundError) as info:
        blob_store.get("jobs/nope/fn")
    assert info.value.key == "jobs/nope/fn"
    assert "is missing" in str(info.value)
    assert str(blob_store.path_for("jobs/nope/fn")) in str(info.value)


def test_get_of_a_directory_is_not_found(blob_store: BlobStore) -> None:
    """A key that is only a prefix of other keys has no blob of its own."""
    blob_store.put("a/b", b"x")
    assert not blob_store.exists("a")
    with pytest.raises(BlobNotFoundError):
        blob_store.get("a")


def test_put_leaves_no_temporary_files(blob_store: BlobStore) -> None:
    """After put, the directory holds exactly the blob (the temp file was renamed)."""
    blob_store.put("k", b"data")
    assert sorted(entry.name for entry in blob_store.root.iterdir()) == ["k"]


def test_put_failure_is_a_storage_error(tmp_path: Path) -> None:
    """Storing below a regular file fails with a StorageError naming the key."""
    (tmp_path / "file").write_text("not a directory")
    store = BlobStore.from_url(str(tmp_path / "file" / "store"))
    with pytest.raises(StorageError, match="cannot store blob 'k'"):
        store.put("k", b"x")


def test_delete_prefix_matches_whole_components(blob_store: BlobStore) -> None:
    """delete_prefix('jobs/a') removes everything under jobs/a but not jobs/ab; repeating is fine."""
    for key in ["jobs/a/fn", "jobs/a/x/y", "jobs/ab/fn"]:
        blob_store.put(key, b"1")
    blob_store.delete_prefix("jobs/a")
    blob_store.delete_prefix("jobs/a")
    assert not blob_store.exists("jobs/a/fn")
    assert not blob_store.exists("jobs/a/x/y")
    assert blob_store.exists("jobs/ab/fn")


def test_delete_prefix_naming_one_blob_removes_it(blob_store: BlobStore) -> None:
    """A prefix that is itself a blob key removes that blob."""
    blob_store.put("jobs/ab/fn", b"1")
    blob_store.delete_prefix("jobs/ab/fn")
    assert not blob_store.exists("jobs/ab/fn")


def test_a_blob_key_cannot_also_be_a_prefix(blob_store: BlobStore) -> None:
    """Storing a/b after a is a clear StorageError (a is a blob, not a directory)."""
    blob_store.put("a", b"1")
    with pytest.raises(StorageError, match="cannot store blob 'a/b'"):
        blob_store.put("a/b", b"2")


@pytest.mark.parametrize(
    "key",
    [
        "..",
        "../../etc/passwd",
        "a/../../b",
        ".",
        "./x",
        "$(rm -rf ~)",
        "a;b|c&d`e`",
        "nul\x00byte",
        "~root",
        "%2E%2E",
        "C:\\windows",
        "x" * 1000,
        "ünïcødé/名前",
    ],
)
def test_hostile_keys_stay_inside_the_root(blob_store: BlobStore, key: str) -> None:
    """Keys made of '..', shell metacharacters, NUL or huge names round-trip inside the root."""
    blob_store.put(key, key.encode())
    path = blob_store.path_for(key)
    assert path.resolve().is_relative_to(blob_store.root.resolve())
    assert key.encode() == blob_store.get(key)
    assert [path.relative_to(blob_store.root).parts[0]] == [entry.name for entry in blob_store.root.iterdir()]


@pytest.mark.parametrize("key", ["", "/abs/path", "a//b", "trailing/"])
def test_keys_with_empty_components_are_rejected(blob_store: BlobStore, key: str) -> None:
    """Leading, doubled or trailing slashes are a caller error, not a silent rewrite."""
    with pytest.raises(ValueError, match="empty path component"):
        blob_store.put(key, b"x")


def test_symlink_out_of_the_root_is_refused(blob_store: BlobStore, tmp_path: Path) -> None:
    """A symlinked directory pointing outside the root cannot be used to escape it."""
    outside = tmp_path / "outside"
    outside.mkdir()
    blob_store.root.mkdir(parents=True)
    (blob_store.root / "link").symlink_to(outside)
    with pytest.raises(StorageError, match="outside the store root"):
        blob_store.put("link/secret", b"x")
    assert list(outside.iterdir()) == []


def test_join_key_keeps_each_part_one_component(blob_store: BlobStore) -> None:
    """join_key('jobs', 'a/b') and join_key('jobs/a', 'b') are different blobs."""
    blob_store.put(join_key("jobs", "a/b"), b"1")
    blob_store.put(join_key("jobs/a", "b"), b"2")
    assert blob_store.get(join_key("jobs", "a/b")) == b"1"
    assert blob_store.get(join_key("jobs/a", "b")) == b"2"


_COMPONENTS = st.text(st.characters(blacklist_characters="/"), min_size=1, max_size=300)


@given(component=_COMPONENTS)
def test_encoded_components_are_plain_file_names(component: str) -> None:
    """Any component encodes to a short name with no separator that is not '.' or '..'."""
    encoded = encode_component(component)
    assert "/" not in encoded
    assert "\x00" not in encoded
    assert encoded not in (".", "..")
    assert len(encoded.encode()) <= 255


@given(first=_COMPONENTS, second=_COMPONENTS)
def test_encoding_is_injective(first: str, second: str) -> None:
    """Different components never share a file name."""
    if first != second:
        assert encode_component(first) != encode_component(second)


@given(components=st.lists(_COMPONENTS, min_size=1, max_size=4))
def test_any_key_resolves_under_the_root(components: list[str]) -> None:
    """Whatever the components, the blob path lies under the store root."""
    store = BlobStore(root=Path("/srv/iris-store"))
    path = store.path_for("/".join(components))
    assert path.resolve().is_relative_to(Path("/srv/iris-store").resolve())
    assert len(components) == len(path.relative_to(store.root).parts)
