#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""The remote cache directory under attack (tests/remote/test-remote.sh
test_cache.py starts moto and the proxy): whoever may write [cache] dir
must not make batchd serve wrong bytes or write anywhere else, and bad
bytes from the bucket must not stay cached.

Each test fills a cache through one daemon, tampers with the directory
while no daemon runs (or while one does), starts another on it and
checks what a trainer gets: every sample's bytes as packed, chunks that
no longer match their map fetched again, files planted as symlinks (or a
FIFO) neither written through nor trusted, the victim files they point
at unchanged; and a dataset whose index came corrupted from the bucket
opening once the bucket is fixed.
"""
import os
import stat
import sys
import tempfile
import unittest

import test_remote as TR
from test_remote import PREFIX, REMOTE

VICTIM = b"the victim's bytes: nothing of batchd's may land here\n"


def objects(d):
    return os.path.join(d.cache, "objects")


def object_id(d, key):
    """The id (file name stem) of key's cached object in d's cache, from its map."""
    found = []
    for name in os.listdir(objects(d)):
        if name.endswith(".map"):
            with open(os.path.join(objects(d), name), "rb") as f:
                if key.encode() in f.read():
                    found.append(name[:-4])
    if len(found) != 1:
        raise AssertionError(f"{key}: {len(found)} maps name it in {objects(d)}: {found}")
    return found[0]


def victim(d, name):
    path = os.path.join(d.dir, name)
    with open(path, "wb") as f:
        f.write(VICTIM)
    return path


def log_text(d):
    with open(d.log, errors="replace") as f:
        return f.read()


class CacheCase(TR.RemoteCase):
    def two_packs(self, tag):
        """Two packs of one size, different bytes, in the bucket as TAG-a.bpk
        and TAG-b.bpk. @return [(dataset, key, expect, path)] for each."""
        top = tempfile.mkdtemp(prefix=f"{tag}-packs-", dir=TR.WORK)
        (a, ea), (b, eb) = self.swap_packs(top, 256, 4096, "16K")
        out = []
        for path, expect, name in ((a, ea, f"{tag}-a.bpk"), (b, eb, f"{tag}-b.bpk")):
            TR.upload_dataset(path, name)
            out.append((f"{REMOTE}/{name}", f"{PREFIX}/{name}", expect, path))
        return out

    def fill(self, tag, packs):
        """A daemon that read every pack once; stopped. @return it."""
        d = self.daemon(tag)
        for dataset, _, expect, _ in packs:
            self.epochs_exact(d, dataset, expect, epochs=1, keys=False)
        self.stop(d)
        return d

    def assert_refetched(self, d, key, path):
        self.assertTrue(self.block_gets({key: TR.block_region(path)}),
                        f"{key}: served after tampering without a GET of its blocks")


class Substitutes(CacheCase):
    def test_swapped_data_file_is_fetched_again(self):
        packs = self.two_packs("subst")
        (a, akey, ea, apath), (_, bkey, _, _) = packs
        first = self.fill("subst1", packs)
        ida, idb = object_id(first, akey), object_id(first, bkey)
        # A valid pack of the same size, every checksum of its own right,
        # and a file of batchd's (the same owner, one link): only the map's
        # hashes tell it from the object.
        with open(os.path.join(objects(first), f"{idb}.data"), "rb") as f:
            other = f.read()
        tmp = os.path.join(objects(first), "swap.tmp")
        with open(tmp, "wb") as f:
            f.write(other)
        os.replace(tmp, os.path.join(objects(first), f"{ida}.data"))
        TR.reset(stats_only=True)
        again = self.daemon("subst2", cache=first.cache)
        self.epochs_exact(again, a, ea, epochs=2, keys=False)
        self.assert_refetched(again, akey, apath)
        self.assertIn("is not the bytes fetched for it", log_text(again))

    def test_flipped_byte_in_a_cached_footer_is_fetched_again(self):
        packs = self.two_packs("flipidx")
        (a, akey, ea, _), _ = packs
        first = self.fill("flipidx1", packs)
        data = os.path.join(objects(first), f"{object_id(first, akey)}.data")
        at = os.path.getsize(data) - 40  # inside the footer, which sits after the index
        with open(data, "r+b") as f:
            f.seek(at)
            byte = f.read(1)
            f.seek(at)
            f.write(bytes([byte[0] ^ 0x5A]))
        logs = []
        for n in range(2):
            # Twice: the second start finds the chunk fetched again in the map.
            again = self.daemon(f"flipidx{n + 2}", cache=first.cache)
            self.epochs_exact(again, a, ea, epochs=1, keys=False)
            self.stop(again)
            logs.append(log_text(again))
        self.assertIn("is not the bytes fetched for it", logs[0])
        self.assertNotIn("is not the bytes fetched for it", logs[1])


class Planted(CacheCase):
    def test_symlinks_are_not_written_through(self):
        packs = self.two_packs("plant")
        (a, akey, ea, apath), (b, bkey, eb, bpath) = packs
        first = self.fill("plant1", packs)
        ida, idb = object_id(first, akey), object_id(first, bkey)
        obj = objects(first)
        # a: its files gone, a symlink where its data file will be made.
        v_data = victim(first, "victim-data")
        for suffix in (".map", ".data"):
            os.unlink(os.path.join(obj, ida + suffix))
        os.symlink(v_data, os.path.join(obj, f"{ida}.data"))
        # Every name a map's temporary had before: symlinks to a victim.
        v_tmp = victim(first, "victim-tmp")
        for i in (ida, idb):
            os.symlink(v_tmp, os.path.join(obj, f".{i}.map.tmp"))
        # b: its data file a symlink to a copy of its right bytes: not used.
        right = os.path.join(first.dir, "b-copy.data")
        os.rename(os.path.join(obj, f"{idb}.data"), right)
        os.symlink(right, os.path.join(obj, f"{idb}.data"))
        # A FIFO where a map would be: opening it must not hang the start.
        os.mkfifo(os.path.join(obj, "0123456789abcdef0123456789abcdef.map"))
        TR.reset(stats_only=True)
        again = self.daemon("plant2", cache=first.cache)
        self.epochs_exact(again, a, ea, epochs=2, keys=False)
        self.epochs_exact(again, b, eb, epochs=1, keys=False)
        self.assert_refetched(again, akey, apath)
        self.assert_refetched(again, bkey, bpath)
        self.stop(again)
        for path in (v_data, v_tmp):
            with open(path, "rb") as f:
                self.assertEqual(f.read(), VICTIM, f"{path} was written through a symlink")
        for i in (ida, idb):
            for suffix in (".map", ".data"):
                st = os.lstat(os.path.join(obj, i + suffix))
                self.assertTrue(stat.S_ISREG(st.st_mode), f"{i}{suffix} is not a regular file now")
        self.assertFalse(os.path.exists(os.path.join(obj, "0123456789abcdef0123456789abcdef.map")),
                         "the planted FIFO is still there")

    def test_objects_dir_as_a_symlink_is_refused(self):
        d = self.daemon("plantdir", start=False)
        elsewhere = os.path.join(d.dir, "elsewhere")
        os.makedirs(elsewhere)
        os.makedirs(d.cache)
        os.symlink(elsewhere, objects(d))
        with self.assertRaises(RuntimeError):
            d.start()
        d.proc = None  # it exited, as it should: nothing for the cleanup to stop
        self.assertIn("objects is a symbolic link, which batchd does not follow", d.tail())
        self.assertEqual(os.listdir(elsewhere), [], "batchd wrote into the symlinked directory")


class BadBytesFromTheBucket(CacheCase):
    def test_a_bad_block_is_fetched_again_unseen(self):
        # The first GET of the object's second chunk (block bytes only)
        # comes with its last byte flipped: the block that holds it fails
        # its hash at decode, its chunk is fetched again, and the epoch is
        # exact with no failed batch.
        packs = self.two_packs("badblock")
        (a, akey, ea, apath), _ = packs
        d = self.daemon("badblock")
        chunk = 256 << 10
        lo, hi = TR.block_region(apath)
        self.assertGreater(hi, 2 * chunk, "the pack's blocks must cover its second chunk")
        TR.faults(flip_once={akey: [chunk]})
        ld = self.loader(d, a, shuffle="none", keys=False)
        self.assert_exact(self.read_epoch(ld), ea, f"{a} with a bad block fetched")
        ld.close()
        gets = [g for g in TR.stats()["gets"] if g["key"] == akey and
                TR.parse_range(g["range"]) and TR.parse_range(g["range"])[0] == chunk]
        self.assertEqual(len(gets), 2, f"the second chunk's GETs: {gets}")
        self.assertIn("its cached bytes are dropped and fetched again", log_text(d))

    def test_index_corrupted_in_flight_is_not_kept(self):
        packs = self.two_packs("badidx")
        (a, akey, ea, _), _ = packs
        d = self.daemon("badidx")
        # Every GET of the object has its last byte flipped: the footer's
        # checksum fails, on the first load and on the one after the drop.
        TR.faults(flip_keys=[akey])
        err = self.open_error(d, a)
        self.assertIn("EBADMSG", str(err))
        self.assertIn("its cached bytes are dropped and fetched again", log_text(d))
        # The bucket answers right again: the next open gets the object's
        # bytes, not the bad ones the first fetched.
        TR.faults()
        self.epochs_exact(d, a, ea, epochs=2, keys=False)


if __name__ == "__main__":
    TR.setUpModule = lambda: None
    TR.T.require_tools()
    if not (TR.ENDPOINT and TR.BUCKET and TR.CTL and TR.WORK):
        print("run through tests/remote/test-remote.sh test_cache.py", file=sys.stderr)
        sys.exit(1)
    unittest.main(verbosity=2)
