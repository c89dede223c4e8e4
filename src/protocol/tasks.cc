#include "protocol/tasks.h"

#include <array>
#include <utility>

#include "protocol/messages.h"

namespace tw::protocol {

// ---- writing ----
BatchWriter::BatchWriter() { take(); }

OutFrame BatchWriter::take() {
  OutFrame out = std::move(frame_);
  frame_ = OutFrame();
  WireWriter w(frame_.head);
  w.u8(static_cast<uint8_t>(ClientMsg::kBatch));
  w.u32(0);  // task count, patched as tasks are added
  count_ = 0;
  last_head_ = 0;
  return out;
}

void BatchWriter::begin_task() {
  last_head_ = frame_.head.size();
  last_segments_ = frame_.segments.size();
}

void BatchWriter::patch_count() {
  ++count_;
  for (int i = 0; i < 4; ++i) frame_.head[1 + i] = static_cast<uint8_t>(count_ >> (8 * i));
}

void BatchWriter::remove_last() {
  if (count_ == 0 || last_head_ < kEmptyBytes) return;
  frame_.head.resize(last_head_);
  frame_.segments.resize(last_segments_);
  --count_;
  for (int i = 0; i < 4; ++i) frame_.head[1 + i] = static_cast<uint8_t>(count_ >> (8 * i));
  last_head_ = 0;
}

void BatchWriter::add_move(TaskKind kind, ir::TensorId id, const TensorMeta& meta,
                           const TensorSource& source) {
  if (kind == TaskKind::kImport) {
    add(ImportTask{id, meta, source});
  } else {
    add(MoveLocalTask{id, meta, source});
  }
}

// ---- decoding ----
namespace {

// The id lists of a task, moved from one Task to another so that their capacity outlives the
// kind that held them (a cleared task, or one decoded into as another kind).
struct IdLists {
  // A long id list (a drop of a whole model, say) is freed rather than kept by a Task that a
  // server holds on to between batches.
  static constexpr size_t kKeptIds = 1024;
  IdList lists[2];
  size_t n = 0, given = 0;

  struct Take {
    IdLists& s;
    void operator()(const char*, IdList& v) {
      if (s.n < 2 && v.capacity() <= kKeptIds) s.lists[s.n++] = std::move(v);
    }
    template <class T>
    void operator()(const char*, T&) {}
  };
  struct Give {
    IdLists& s;
    void operator()(const char*, IdList& v) {
      if (s.given < s.n) {
        v = std::move(s.lists[s.given++]);
        v.clear();
      }
    }
    template <class T>
    void operator()(const char*, T&) {}
  };
};

// Decodes a task of kind T (its kind byte read) into t, in place when t holds a T already.
template <class T>
Status decode_as(WireReader& r, Task& t, bool packed) {
  T* task = std::get_if<T>(&t);
  if (!task) {
    IdLists kept;
    std::visit([&](auto& old) { old.fields(IdLists::Take{kept}); }, t);
    task = &t.emplace<T>();
    task->fields(IdLists::Give{kept});
  }
  if constexpr (HasPackedKind<T>) task->packed_ids = packed;
  FieldReader get(r, packed);
  task->fields(get);
  return get.status;
}

// Each task code's decoder, made from the Task variant's kinds (a code used twice fails to
// compile).
struct Decoder {
  Status (*decode)(WireReader&, Task&, bool) = nullptr;
  bool packed = false;
};
constexpr std::array<Decoder, 256> make_decoders() {
  std::array<Decoder, 256> table{};
  auto set = [&](TaskKind kind, Decoder d) {
    auto& slot = table[static_cast<uint8_t>(kind)];
    if (slot.decode) throw "two task kinds share a wire code";
    slot = d;
  };
  [&]<size_t... I>(std::index_sequence<I...>) {
    auto one = [&]<class T>(std::type_identity<T>) {
      set(T::kKind, {&decode_as<T>, false});
      if constexpr (HasPackedKind<T>) set(T::kPackedKind, {&decode_as<T>, true});
    };
    (one(std::type_identity<std::variant_alternative_t<I, Task>>{}), ...);
  }
  (std::make_index_sequence<std::variant_size_v<Task>>{});
  return table;
}
constexpr std::array<Decoder, 256> kDecoders = make_decoders();

Status decode_task(WireReader& r, Task& t) {
  uint8_t code = 0;
  TW_RETURN_NOT_OK(r.u8(code));
  const Decoder& d = kDecoders[code];
  if (!d.decode) return data_loss("unknown task kind " + std::to_string(code));
  return d.decode(r, t, d.packed);
}

}  // namespace

void clear_task(Task& t) {
  std::visit(
      [](auto& task) {
        using T = std::decay_t<decltype(task)>;
        IdLists kept;
        task.fields(IdLists::Take{kept});
        task = T{};
        task.fields(IdLists::Give{kept});
      },
      t);
}

BatchDecoder::BatchDecoder(const Buffer& payload) : r_(payload) {
  uint8_t kind = 0;
  status_ = r_.u8(kind);
  if (status_.ok() && kind != static_cast<uint8_t>(ClientMsg::kBatch)) {
    status_ = data_loss("expected a Batch message, got message type " + std::to_string(kind));
  }
  if (status_.ok()) status_ = r_.count(count_, 1);  // every task takes at least one byte
  if (status_.ok() && count_ == 0 && !r_.done()) {
    status_ = data_loss(std::to_string(r_.remaining()) + " trailing bytes after batch");
  }
}

bool BatchDecoder::decode_one(Task& t) {
  Status s = decode_task(r_, t);
  if (!s.ok()) {
    status_ =
        s.with_context("batch task " + std::to_string(index_) + " of " + std::to_string(count_));
    return false;
  }
  if (++index_ == count_ && !r_.done()) {
    status_ = data_loss(std::to_string(r_.remaining()) + " trailing bytes after batch");
  }
  return true;
}

bool BatchDecoder::next(std::vector<Task>& tasks, size_t max) {
  const size_t before = tasks.size();
  for (size_t k = 0; k < max && more(); ++k) {
    if (!decode_one(tasks.emplace_back())) {  // decoded in place: a Task is large to move
      tasks.pop_back();
      break;
    }
  }
  return tasks.size() > before;
}

size_t BatchDecoder::next_reusing(std::vector<Task>& tasks, size_t max) {
  size_t n = 0;
  for (; n < max && more(); ++n) {
    Task& t = n < tasks.size() ? tasks[n] : tasks.emplace_back();
    if (!decode_one(t)) {
      clear_task(t);  // (a partly decoded task is not handed out)
      break;
    }
  }
  return n;
}

Status decode_batch(const Buffer& payload, std::vector<Task>& tasks) {
  BatchDecoder d(payload);
  while (d.next(tasks, 256)) {
  }
  return d.status();
}

}  // namespace tw::protocol
