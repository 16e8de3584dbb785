# SPDX-License-Identifier: MIT
"""A stand-in batchd that serves GPU sessions as lib/proto/PROTOCOL.md says, for
testing libbatchclient's GPU streams against the fake CUDA driver
(fake_libcuda.c) where there is no GPU, and that breaks, on request, each
rule of the device table a hostile daemon could break. It serves host
sessions too (an OPEN with placement -1: four descriptors, no device
table), for the failures no real daemon makes on demand: batches failed
with a given errno and reason, a ring stopped, an OPEN never answered, a
connection hung up mid-stream.

Why not the real batchd: it needs a GPU to make a GPU session. This one
speaks the socket protocol (HELLO, OPEN, READY with five descriptors,
CLOSE), lays out the data memfd (ring header, descriptors, records, device
table) and publishes every batch of one epoch at once: one batch per slot,
copied into its device slot of the "device allocation", a memfd that goes
out as READY's fifth descriptor. The fake driver maps that memfd where the
client maps device memory, so a test can compare bytes on both sides.

Events: the device table's IPC handles come from the fake driver
(fake_cuda_event_new), which counts records and waits per event.

Copies in flight (Plan(copies_land=False)): as on a GPU, where batchd
publishes a batch once its copy is queued, every device slot holds the fake
CUDA's poison (POISON) and its ready event is pending
(fake_cuda_event_pending) until the test lands the copy
(Session.land), so a consumer that reads before waiting sees the poison.

Runs in a thread of the test process; one connection at a time is plenty.
"""
import fcntl
import mmap
import os
import socket
import struct
import threading

PROTO_MAGIC = 0x31504442
HELLO, HELLO_OK, OPEN, READY, ERROR, CLOSE, CLOSED = 1, 2, 3, 4, 5, 6, 7
RING_MAGIC = 0x31474E4952504442
GPU_MAGIC = 0x3155504752504442
F_SEAL_FUTURE_WRITE = 0x0010
DEVICE_ALIGN = 512
POISON = 0xDB              # FAKE_CUDA_POISON, tests/fakecuda/fake_cuda.h


def up(n, a):
    return (n + a - 1) // a * a


def arena_offset(slots):
    return up(4096 + 64 * slots, 4096)


def ctrl_size(slots):
    return up(256 + 8 * slots, 4096)


def gpu_size(slots):
    return up(128 + 128 * slots, 4096)


def sample_bytes(sid, size):
    """Sample sid's bytes: its id, then a pattern of it."""
    return (sid.to_bytes(8, "little") + bytes((sid * 7 + k) & 0xFF for k in range(size)))[:size]


def message(mtype, body=b""):
    return struct.pack("<IHHII", PROTO_MAGIC, mtype, 1, 16 + len(body), 0) + body


def memfd(name, size):
    fd = os.memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    os.ftruncate(fd, size)
    return fd


class Plan:
    """How the next session is laid out. Defaults follow PROTOCOL.md;
    tests change fields to play a hostile or broken daemon."""

    def __init__(self, **kw):
        self.slots = 4
        self.batch_size = 8
        self.sample_size = 100
        self.uuid = None          # None: the UUID the OPEN asked for
        self.ordinal = 0
        self.table_magic = GPU_MAGIC
        self.table_slots = None   # None: slots
        self.slot_bytes = None    # None: the largest batch rounded up to DEVICE_ALIGN
        self.dev_size = None      # None: slots * slot_bytes rounded up to 2 MiB
        self.gpu_offset = None    # None: right after the arena
        self.gpu_size = None      # None: gpu_size(slots)
        self.nfds = None          # None: 5 for a GPU session, 4 for a host one
        self.placement = None     # None: as opened
        self.desc_device = {}     # seq -> a device offset other than the slot's
        self.refuse = None        # (errno, message): answer OPEN with ERROR
        self.copies_land = True   # False: slots poisoned, ready pending until Session.land
        self.failed = {}          # seq -> (errno, reason): that batch failed
        self.produced = None      # batches published (None: all slots)
        self.stop = None          # errno: the ring STOPPED with it after the published ones
        self.silent = False       # True: OPEN is never answered
        for k, v in kw.items():
            if not hasattr(self, k):
                raise AttributeError(k)
            setattr(self, k, v)


class Session:
    def __init__(self, sid, plan, placement, uuid, fake):
        p = plan
        S, B, Z = p.slots, p.batch_size, p.sample_size
        self.id, self.plan, self.fake = sid, p, fake
        self.samples = S * B
        payload = B * Z
        table = B * 24
        self.payload_at = up(table, 256)
        rec = up(self.payload_at + payload, 4096)
        arena = arena_offset(S)
        self.gpu_off = arena + S * rec        # where the table is; the header may say otherwise
        hdr_off = self.gpu_off if p.gpu_offset is None else p.gpu_offset
        gsize = gpu_size(S) if p.gpu_size is None else p.gpu_size
        self.data_size = arena + S * rec + gpu_size(S)
        self.ctrl_size = ctrl_size(S)
        self.slot_bytes = up(payload + 1, DEVICE_ALIGN) if p.slot_bytes is None else p.slot_bytes
        self.dev_size = (up(S * self.slot_bytes, 2 << 20) if p.dev_size is None else p.dev_size)
        self.uuid = bytes(p.uuid if p.uuid is not None else uuid)
        self.placement = placement if p.placement is None else p.placement
        self.host = placement < 0              # a host session was asked for: no device side

        self.data_fd = memfd("fake-data", self.data_size)
        self.ctrl_fd = memfd("fake-ctrl", self.ctrl_size)
        self.dev_fd = memfd("fake-device", max(self.dev_size, 4096))
        self.data = mmap.mmap(self.data_fd, self.data_size)
        self.ctrl = mmap.mmap(self.ctrl_fd, self.ctrl_size)
        self.rel_r, self.rel_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        self.pub_r, self.pub_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)

        struct.pack_into("<QIIQQQQQII", self.data, 0, RING_MAGIC, 1, 4096, sid, self.data_size,
                         arena, S * rec, S, S, B)
        if not self.host:
            struct.pack_into("<QQ", self.data, 64, hdr_off, gsize)
        # The device table and its events.
        self.ready, self.released = [], []
        struct.pack_into("<Q16sQQIIi", self.data, self.gpu_off, p.table_magic, self.uuid,
                         self.dev_size, self.slot_bytes,
                         S if p.table_slots is None else p.table_slots, 1, p.ordinal)
        for i in range(S):
            for kind, where in ((self.ready, 0), (self.released, 64)):
                h = bytearray(64)
                kind.append(fake.event_new(h))
                at = self.gpu_off + 128 + 128 * i + where
                self.data[at:at + 64] = bytes(h)
        # One epoch: batch seq in record seq and in device slot seq.
        self.expect = []
        for seq in range(S):
            at = arena + seq * rec
            ids = [seq * B + j for j in range(B)]
            body = b"".join(sample_bytes(i, Z) for i in ids)
            for j, i in enumerate(ids):
                struct.pack_into("<QQQ", self.data, at + 24 * j, i, j * Z, Z)
            self.data[at + self.payload_at:at + self.payload_at + payload] = body
            dev = p.desc_device.get(seq, seq * self.slot_bytes)
            if seq * self.slot_bytes + payload <= self.dev_size:
                os.pwrite(self.dev_fd, body if p.copies_land else bytes([POISON]) * payload,
                          seq * self.slot_bytes)
            if not p.copies_land:
                fake.event_pending(self.ready[seq], 1)
            status = 0
            if seq in p.failed:
                err, reason = p.failed[seq]
                status = -err
                self.data[at:at + len(reason) + 1] = reason.encode() + b"\0"
            struct.pack_into("<QQQQQQIiQ", self.data, 4096 + 64 * seq, seq, 0, seq, at,
                             at + self.payload_at, payload, B, status,
                             0 if self.host else dev)
            self.expect.append((ids, body))
        struct.pack_into("<Q", self.data, 128, S if p.produced is None else p.produced)
        if p.stop is not None:
            struct.pack_into("<Ii", self.data, 192, 1, -p.stop)   # STOPPED, and why
        fcntl.fcntl(self.data_fd, fcntl.F_ADD_SEALS,
                    fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | F_SEAL_FUTURE_WRITE)
        fcntl.fcntl(self.ctrl_fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW)

    def land(self, seq):
        """The copy of batch seq lands (Plan(copies_land=False)): its bytes
        into its device slot, then its ready event completes."""
        os.pwrite(self.dev_fd, self.expect[seq][1], seq * self.slot_bytes)
        self.fake.event_pending(self.ready[seq], 0)

    def mark(self, slot):
        """The client's release mark of a slot (seq + 1 of its last release)."""
        return struct.unpack_from("<Q", self.ctrl, 256 + 8 * slot)[0]

    def ready_body(self):
        p = self.plan
        return struct.pack("<QQQQQQQIIiI", self.id, 0xFEED, self.samples, p.slots,
                           self.data_size, self.ctrl_size, p.sample_size, p.batch_size,
                           p.slots, self.placement, 0)

    def client_fds(self):
        n = self.plan.nfds
        if n is None:
            n = 4 if self.host else 5
        return [self.data_fd, self.ctrl_fd, self.rel_w, self.pub_r, self.dev_fd][:n]

    def close(self):
        for fd in (self.data_fd, self.ctrl_fd, self.dev_fd, self.rel_r, self.rel_w, self.pub_r,
                   self.pub_w):
            os.close(fd)
        self.data.close()
        self.ctrl.close()
        for i in self.ready + self.released:
            self.fake.event_free(i)


class FakeBatchd:
    """Listen on path; serve one connection at a time in a thread.
    opens: (placement, device_uuid bytes, path) per OPEN received;
    closes: session ids CLOSEd; sessions: id -> Session of the open ones.
    hang_up() ends the connection being served, as a daemon that died."""

    def __init__(self, path, fake):
        self.path = path
        self.fake = fake
        self.plan = Plan()
        self.opens, self.closes, self.sessions = [], [], {}
        self.next_id = 1
        self.conn = None
        self.lock = threading.Lock()
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.sock.bind(path)
        self.sock.listen(4)
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.conn = conn
            with conn:
                self._connection(conn)

    def _connection(self, conn):
        while True:
            try:
                msg = conn.recv(65536)
            except OSError:
                return
            if len(msg) < 16:
                return
            mtype = struct.unpack_from("<H", msg, 4)[0]
            with self.lock:
                if mtype == HELLO:
                    server = b"fake-batchd"
                    conn.send(message(HELLO_OK, struct.pack("<HHIII", 1, 0, 8, 1 << 20,
                                                            len(server)) + server))
                elif mtype == OPEN:
                    self._open(conn, msg)
                elif mtype == CLOSE:
                    sid = struct.unpack_from("<Q", msg, 16)[0]
                    self.closes.append(sid)
                    s = self.sessions.pop(sid, None)
                    if s:
                        s.close()
                    conn.send(message(CLOSED, struct.pack("<Q", sid)))
                else:
                    return

    def _open(self, conn, msg):
        placement = struct.unpack_from("<i", msg, 60)[0]
        uuid = msg[68:84]
        n = struct.unpack_from("<I", msg, 84)[0]
        self.opens.append((placement, uuid, msg[88:88 + n].decode()))
        if self.plan.silent:
            return
        if self.plan.refuse:
            code, text = self.plan.refuse
            text = text.encode()
            conn.send(message(ERROR, struct.pack("<iI", -code, len(text)) + text))
            return
        s = Session(self.next_id, self.plan, placement, uuid, self.fake)
        self.next_id += 1
        self.sessions[s.id] = s
        socket.send_fds(conn, [message(READY, s.ready_body())], s.client_fds())

    def hang_up(self):
        if self.conn is not None:
            self.conn.shutdown(socket.SHUT_RDWR)

    def close(self):
        self.sock.close()
        with self.lock:
            for s in self.sessions.values():
                s.close()
            self.sessions.clear()


class NoEvents:
    """Event handles for a FakeBatchd in a process without the fake driver
    (the client refuses the session before it opens any)."""

    def __init__(self):
        self.n = 0

    def event_new(self, handle):
        handle[:] = bytes(64)
        self.n += 1
        return self.n

    def event_free(self, index):
        pass

    def event_pending(self, index, pending):
        pass
