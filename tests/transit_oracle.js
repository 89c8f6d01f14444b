// The oracle for tests/test_transit.py: Cognitect's transit-js reads and writes Transit JSON.
// One JSON request a line on stdin, one JSON answer a line on stdout:
//   {"op": "encode", "value": DESC}  ->  {"ok": true, "text": TRANSIT_JSON}
//   {"op": "decode", "text": TEXT}   ->  {"ok": true, "value": DESC}
// A DESC names a value's type and value, so that both sides can say what they meant:
// {"t": "null"}, {"t": "bool", "v": true}, {"t": "num", "v": 1.5 or "NaN"/"INF"/"-INF"},
// {"t": "int", "v": "<decimal, past 2^53>"}, {"t": "bigint"|"bigdec"|"str"|"kw"|"sym"|"uuid"|
// "uri"|"bytes"(base64)|"char", "v": "..."}, {"t": "inst", "v": "<epoch millis>"},
// {"t": "vec"|"list"|"set", "v": [DESC...]}, {"t": "map", "v": [[DESC, DESC]...]},
// {"t": "tagged", "tag": "...", "v": DESC}.
"use strict";

const path = require("path");
const readline = require("readline");
const transit = require(path.join(__dirname, "transit_node", "node_modules", "transit-js"));

const SPECIAL = { NaN: NaN, INF: Infinity, "-INF": -Infinity };

function build(d) {
  const v = d.v;
  switch (d.t) {
    case "null": return null;
    case "bool": case "str": return v;
    case "num": return typeof v === "string" ? SPECIAL[v] : v;
    case "int": return transit.integer(v);
    case "bigint": return transit.bigInt(v);
    case "bigdec": return transit.bigDec(v);
    case "kw": return transit.keyword(v);
    case "sym": return transit.symbol(v);
    case "uuid": return transit.uuid(v);
    case "uri": return transit.uri(v);
    case "bytes": return transit.binary(v);
    case "char": return transit.tagged("c", v);
    case "inst": return new Date(Number(v));
    case "vec": return v.map(build);
    case "list": return transit.list(v.map(build));
    case "set": return transit.set(v.map(build));
    case "map": return transit.map([].concat(...v.map(([k, x]) => [build(k), build(x)])));
    case "tagged": return transit.tagged(d.tag, build(v));
    default: throw new Error("unknown description type " + d.t);
  }
}

function number(x) {
  if (Number.isNaN(x)) return { t: "num", v: "NaN" };
  if (!Number.isFinite(x)) return { t: "num", v: x > 0 ? "INF" : "-INF" };
  return { t: "num", v: x };
}

function describeTagged(x) {
  if (transit.isBigInt(x)) return { t: "bigint", v: x.rep };
  if (transit.isBigDec(x)) return { t: "bigdec", v: x.rep };
  if (transit.isURI(x)) return { t: "uri", v: x.rep };
  if (transit.isList(x)) return { t: "list", v: x.rep.map(describe) };
  return { t: "tagged", tag: x.tag, v: describe(x.rep) };
}

function describe(x) {
  if (x === null || x === undefined) return { t: "null" };
  if (typeof x === "boolean") return { t: "bool", v: x };
  if (typeof x === "number") return number(x);
  if (typeof x === "string") return { t: "str", v: x };
  if (transit.isKeyword(x)) return { t: "kw", v: x.toString().slice(1) };
  if (transit.isSymbol(x)) return { t: "sym", v: x.toString() };
  if (transit.isUUID(x)) return { t: "uuid", v: x.toString() };
  if (transit.isInteger(x)) return { t: "int", v: x.toString() };
  if (x instanceof Date) return { t: "inst", v: String(x.getTime()) };
  if (x instanceof Uint8Array) return { t: "bytes", v: Buffer.from(x).toString("base64") };
  if (transit.isTaggedValue(x)) return describeTagged(x);
  if (Array.isArray(x)) return { t: "vec", v: x.map(describe) };
  if (transit.isSet(x)) return { t: "set", v: Array.from(x.values()).map(describe) };
  if (transit.isMap(x)) return { t: "map", v: Array.from(x.entries()).map(([k, v]) => [describe(k), describe(v)]) };
  throw new Error("cannot describe " + String(x));
}

function answer(request) {
  if (request.op === "encode") return { ok: true, text: transit.writer("json").write(build(request.value)) };
  if (request.op === "decode") return { ok: true, value: describe(transit.reader("json").read(request.text)) };
  throw new Error("unknown op " + request.op);
}

readline.createInterface({ input: process.stdin }).on("line", (line) => {
  let reply;
  try {
    reply = answer(JSON.parse(line));
  } catch (error) {
    reply = { ok: false, error: String(error && error.stack || error) };
  }
  process.stdout.write(JSON.stringify(reply) + "\n");
});
