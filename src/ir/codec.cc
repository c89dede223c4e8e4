#include "ir/codec.h"

#include <string>

namespace tw::ir {
namespace {

struct Encoder {
  WireWriter& w;
  void operator()(const char*, const In& v) const { w.u64(v.id); }
  void operator()(const char*, const Out& v) const { w.u64(v.id); }
  void operator()(const char*, const std::vector<In>& v) const {
    w.u32(static_cast<uint32_t>(v.size()));
    for (const In& x : v) w.u64(x.id);
  }
  void operator()(const char*, const std::vector<int64_t>& v) const {
    w.u32(static_cast<uint32_t>(v.size()));
    for (int64_t x : v) w.i64(x);
  }
  void operator()(const char*, int64_t v) const { w.i64(v); }
  void operator()(const char*, uint64_t v) const { w.u64(v); }
  void operator()(const char*, double v) const { w.f64(v); }
  void operator()(const char*, bool v) const { w.u8(v ? 1 : 0); }
  void operator()(const char*, DType v) const { w.u8(static_cast<uint8_t>(v)); }
  void operator()(const char*, const Scalar& v) const {
    w.u8(v.is_float ? 1 : 0);
    if (v.is_float) {
      w.f64(v.f);
    } else {
      w.i64(v.i);
    }
  }
  void operator()(const char*, const Bytes& v) const {
    w.u64(v.data.size());
    w.raw_ref(v.data);
  }
  template <class E>
  requires std::is_enum_v<E>
  void operator()(const char*, E v) const { w.u8(static_cast<uint8_t>(v)); }
};

struct Decoder {
  WireReader& r;
  const char* op;
  Status st;
  // Keeps the first failure, naming op.field (called with every field's status: the name is
  // built only for a failure).
  void fail(Status s, const char* field) {
    if (st.ok() && !s.ok()) st = s.with_context(std::string(op) + "." + field);
  }
  void operator()(const char* f, In& v) {
    if (st.ok()) fail(r.u64(v.id), f);
  }
  void operator()(const char* f, Out& v) {
    if (st.ok()) fail(r.u64(v.id), f);
  }
  void operator()(const char* f, std::vector<In>& v) {
    if (!st.ok()) return;
    uint32_t n = 0;
    Status s = r.count(n, 8);
    if (!s.ok()) return fail(s, f);
    v.resize(n);
    for (In& x : v) {
      s = r.u64(x.id);
      if (!s.ok()) return fail(s, f);
    }
  }
  void operator()(const char* f, std::vector<int64_t>& v) {
    if (!st.ok()) return;
    uint32_t n = 0;
    Status s = r.count(n, 8);
    if (!s.ok()) return fail(s, f);
    v.resize(n);
    for (int64_t& x : v) {
      s = r.i64(x);
      if (!s.ok()) return fail(s, f);
    }
  }
  void operator()(const char* f, int64_t& v) {
    if (st.ok()) fail(r.i64(v), f);
  }
  void operator()(const char* f, uint64_t& v) {
    if (st.ok()) fail(r.u64(v), f);
  }
  void operator()(const char* f, double& v) {
    if (st.ok()) fail(r.f64(v), f);
  }
  void operator()(const char* f, bool& v) {
    if (!st.ok()) return;
    uint8_t b = 0;
    Status s = r.u8(b);
    if (!s.ok()) return fail(s, f);
    if (b > 1) return fail(data_loss("bool byte " + std::to_string(b) + " is not 0 or 1"), f);
    v = b == 1;
  }
  void operator()(const char* f, DType& v) {
    if (!st.ok()) return;
    uint8_t b = 0;
    Status s = r.u8(b);
    if (!s.ok()) return fail(s, f);
    if (!dtype_valid(b)) return fail(data_loss("unknown dtype code " + std::to_string(b)), f);
    v = static_cast<DType>(b);
  }
  void operator()(const char* f, Scalar& v) {
    if (!st.ok()) return;
    uint8_t tag = 0;
    Status s = r.u8(tag);
    if (!s.ok()) return fail(s, f);
    if (tag > 1) return fail(data_loss("scalar tag " + std::to_string(tag) + " is not 0 or 1"), f);
    if (tag == 1) {
      double d = 0;
      s = r.f64(d);
      v = Scalar(d);
    } else {
      int64_t i = 0;
      s = r.i64(i);
      v = Scalar(i);
    }
    if (!s.ok()) fail(s, f);
  }
  void operator()(const char* f, Bytes& v) {
    if (!st.ok()) return;
    uint64_t n = 0;
    Status s = r.u64(n);
    if (!s.ok()) return fail(s, f);
    if (n > r.remaining()) {
      return fail(data_loss("byte run of " + std::to_string(n) + " bytes but only " +
                            std::to_string(r.remaining()) + " left"),
                  f);
    }
    fail(r.bytes(static_cast<size_t>(n), v.data), f);
  }
  template <class E>
  requires std::is_enum_v<E>
  void operator()(const char* f, E& v) {
    if (!st.ok()) return;
    uint8_t b = 0;
    Status s = r.u8(b);
    if (!s.ok()) return fail(s, f);
    if (b >= static_cast<uint8_t>(E::kCount)) {
      return fail(data_loss("unknown kind code " + std::to_string(b)), f);
    }
    v = static_cast<E>(b);
  }
};

template <class T>
Result<Op> decode_as(WireReader& r) {
  T op;
  Decoder d{r, OpTraits<T>::kStructName, Status::OK()};
  op.fields(d);
  if (!d.st.ok()) return d.st;
  return Op(std::move(op));
}

}  // namespace

void encode_op(const Op& op, WireWriter& w) {
  w.u16(static_cast<uint16_t>(op_code(op)));
  std::visit(
      [&](const auto& o) {
        if constexpr (!std::is_same_v<std::decay_t<decltype(o)>, std::monostate>)
          o.fields(Encoder{w});
      },
      op);
}

std::vector<uint8_t> encode_op(const Op& op) {
  std::vector<uint8_t> out;
  WireWriter w(out);
  encode_op(op, w);
  return out;
}

Result<Op> decode_op(WireReader& r) {
  uint16_t code = 0;
  TW_RETURN_NOT_OK(r.u16(code).with_context("op code"));
  switch (static_cast<OpCode>(code)) {
#define TW_DECODE_ENTRY(Name, c, since) \
  case OpCode::k##Name: return decode_as<Name>(r);
    TW_OP_LIST(TW_DECODE_ENTRY)
#undef TW_DECODE_ENTRY
  }
  return data_loss("unknown op code " + std::to_string(code) + " (this build knows codes 1.." +
                   std::to_string(kNumOps) + "; is the peer newer?)");
}

Result<Op> decode_op(const uint8_t* data, size_t size) {
  WireReader r(data, size);
  TW_ASSIGN_OR_RETURN(Op op, decode_op(r));
  if (!r.done()) {
    return data_loss(std::to_string(r.remaining()) + " trailing bytes after " + op_name(op));
  }
  return op;
}

}  // namespace tw::ir
