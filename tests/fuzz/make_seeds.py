#!/usr/bin/env python3
"""Writes the fuzzers' small binary seeds (tests/fuzz/seeds/{idx,state_dict}); the lesson fuzzer's
seeds are the real lessons. Re-run after a format change: python3 tests/fuzz/make_seeds.py"""
import gzip, os, struct

HERE = os.path.dirname(os.path.abspath(__file__))

def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF

assert crc32c(b"123456789") == 0xE3069283

def idx(dims, payload):
    return bytes([0, 0, 8, len(dims)]) + b"".join(struct.pack(">I", d) for d in dims) + bytes(payload)

def container(images, labels):
    return struct.pack("<H", len(images)) + images + labels

def entries(items):
    out = b""
    for name, dtype, shape, raw in items:
        out += struct.pack("<I", len(name)) + name + bytes([dtype]) + struct.pack("<I", len(shape))
        out += b"".join(struct.pack("<q", s) for s in shape) + raw
    return out

def v1(items):
    return b"GPULABSD" + struct.pack("<II", 1, len(items)) + entries(items)

def v2(items):
    body = entries(items)
    head = b"GPULABSD" + struct.pack("<IIQ", 2, len(items), len(body))
    return head + body + struct.pack("<I", crc32c(head + body))

def f32(*vals):
    return b"".join(struct.pack("<f", v) for v in vals)

linear = [(b"weight", 0, [2, 3], f32(0.1, -0.2, 0.3, 0.4, -0.5, 0.6)), (b"bias", 0, [2], f32(0.01, -0.02))]
mixed = [(b"0.weight", 0, [1, 2], f32(1, 2)), (b"steps", 1, [1], struct.pack("<q", 7)),
         (b"half", 2, [2], b"\x00\x3c\x00\xc0"), (b"bf", 3, [0, 4], b""), (b"scalar", 0, [], f32(3.5))]

seeds = {
    "idx/two_2x3.bin": container(idx([2, 2, 3], range(12)), idx([2], [1, 9])),
    "idx/empty_28x28.bin": container(idx([0, 28, 28], []), idx([0], [])),
    "idx/one_28x28.bin": container(idx([1, 28, 28], [i % 256 for i in range(784)]), idx([1], [5])),
    "idx/gzip_images.bin": container(gzip.compress(idx([3, 1, 1], [0, 128, 255]), mtime=0), idx([3], [0, 1, 2])),
    "idx/bad_label.bin": container(idx([1, 1, 1], [7]), idx([1], [10])),
    "state_dict/v2_linear.bin": b"\x01" + v2(linear),
    "state_dict/v2_mixed.bin": b"\x01" + v2(mixed),
    "state_dict/v2_empty.bin": b"\x01" + v2([]),
    "state_dict/v1_linear.bin": b"\x00" + v1(linear),
    "state_dict/v2_linear_nofix.bin": b"\x00" + v2(linear),
}
for name, data in seeds.items():
    with open(os.path.join(HERE, "seeds", name), "wb") as f:
        f.write(data)
print(f"wrote {len(seeds)} seeds")
