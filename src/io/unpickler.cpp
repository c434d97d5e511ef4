// The unpickler of the pickle subset in torch .pt files.
//
// Why hand-written: a pickle is a program for a small stack machine that may import and
// call any Python function. The only C++ unpicklers that understand torch's tensors live
// inside libtorch (which moestat must not need), and general-purpose ones either execute
// arbitrary REDUCE calls or do not bound what they allocate. torch.save emits a few dozen
// opcodes and five globals; reading exactly those, with an allowlist as strict as
// torch.load(weights_only=True) and a size check before every allocation, is a few hundred
// lines that a fuzzer can cover completely.
//
// Objects are built in an arena of small nodes addressed by index, so shared references
// (the memo) and in-place mutation (APPENDS into a memoised list) behave as in Python;
// the arena is turned into a PtValue tree at the end, with a depth limit (which also stops
// cycles). Everything the pickle makes (arena nodes, memo entries, marks, stack slots, the
// result, which counts a shared object at every reference) is charged to the file's byte
// budget when it is made, so neither a long run of cheap opcodes nor exponential sharing can
// take more memory than the file is allowed.
#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <moestat/error.hpp>
#include <moestat/printable.hpp>
#include <moestat/utf8.hpp>
#include <optional>
#include <string_view>
#include <unordered_map>

#include "pickle.hpp"
#include "read_budget.hpp"

namespace moestat::io::detail {
namespace {

enum class NodeKind : std::uint8_t {
  kNone,
  kBool,
  kInt,
  kFloat,
  kStr,
  kList,
  kTuple,
  kDict,
  kGlobal,   // a callable or class of the allowlist
  kStorage,  // a persistent id: (storage, type, key, location, numel)
  kTensor,   // _rebuild_tensor_v2(...)
};

enum class Global : std::uint8_t { kRebuildTensorV2, kOrderedDict, kStorageClass };

/// 16 bytes: the payload is the value (bool, int, float bits) or an index into a side table.
struct Node {
  NodeKind kind;
  std::int64_t payload = 0;
};

struct GlobalNode {
  Global global;
  DType storage_dtype = DType::kInt64;  // kStorageClass only
};

struct TensorNode {
  std::uint32_t storage = 0;  // node index of a kStorage
  std::int64_t offset = 0;
  std::vector<std::int64_t> shape, stride;
};

constexpr std::size_t kMaxDims = 32;
// What one memo entry costs in an unordered_map: its node (key, value, next pointer, rounded
// up by the allocator) and its share of the bucket array.
constexpr std::size_t kMemoEntryBytes = 48;

std::string_view kind_name(NodeKind kind) {
  switch (kind) {
    case NodeKind::kNone:
      return "None";
    case NodeKind::kBool:
      return "bool";
    case NodeKind::kInt:
      return "int";
    case NodeKind::kFloat:
      return "float";
    case NodeKind::kStr:
      return "str";
    case NodeKind::kList:
      return "list";
    case NodeKind::kTuple:
      return "tuple";
    case NodeKind::kDict:
      return "dict";
    case NodeKind::kGlobal:
      return "global";
    case NodeKind::kStorage:
      return "storage";
    case NodeKind::kTensor:
      return "tensor";
  }
  return "?";
}

/// Torch's legacy storage class names, by dtype.
std::optional<DType> storage_class_dtype(std::string_view name) {
  if (name == "IntStorage") return DType::kInt32;
  if (name == "LongStorage") return DType::kInt64;
  if (name == "FloatStorage") return DType::kFloat32;
  if (name == "DoubleStorage") return DType::kFloat64;
  if (name == "BoolStorage") return DType::kBool;
  if (name == "ByteStorage") return DType::kUInt8;
  if (name == "ShortStorage") return DType::kInt16;
  return std::nullopt;
}

class Unpickler {
 public:
  Unpickler(std::span<const std::byte> bytes, const StorageLoader& load_storage, ReadBudget& budget,
            std::size_t max_depth)
      : in_(bytes), load_storage_(load_storage), budget_(budget), max_depth_(max_depth) {}

  PtValue run() { return convert(execute(), 0); }

 private:
  // ---- reading the stream ----

  std::uint8_t byte() {
    MOESTAT_CHECK(pos_ < in_.size(), "pickle ends early at byte {}", pos_);
    return std::uint8_t(in_[pos_++]);
  }
  std::span<const std::byte> take(std::uint64_t count) {
    MOESTAT_CHECK(count <= in_.size() - pos_, "pickle ends early: {} bytes wanted at byte {}",
                  count, pos_);
    const auto out = in_.subspan(pos_, std::size_t(count));
    pos_ += std::size_t(count);
    return out;
  }
  template <typename T>
  T little() {
    T value;
    std::memcpy(&value, take(sizeof(T)).data(), sizeof(T));
    return value;
  }
  std::string line() {
    const auto begin = in_.begin() + std::ptrdiff_t(pos_);
    const auto end = std::find(begin, in_.end(), std::byte{'\n'});
    MOESTAT_CHECK(end != in_.end(), "pickle ends inside a GLOBAL name at byte {}", pos_);
    charge(std::size_t(end - begin));
    std::string out(reinterpret_cast<const char*>(&*begin), std::size_t(end - begin));
    pos_ += out.size() + 1;
    return out;
  }

  // ---- the arena and the stack ----

  /// Memory the arena, the memo or the stack is about to take.
  void charge(std::size_t bytes) { budget_.spend(bytes, "the pickle's objects"); }

  std::uint32_t add(NodeKind kind, std::int64_t payload = 0) {
    charge(sizeof(Node));
    nodes_.push_back({kind, payload});
    return std::uint32_t(nodes_.size() - 1);
  }
  std::uint32_t add_container(NodeKind kind, std::vector<std::uint32_t> items = {}) {
    charge(sizeof(items) + items.size() * sizeof(std::uint32_t));
    items_.push_back(std::move(items));
    return add(kind, std::int64_t(items_.size() - 1));
  }
  /// Appends to a list's or dict's items.
  void extend(std::uint32_t container, std::span<const std::uint32_t> values) {
    charge(values.size() * sizeof(std::uint32_t));
    auto& list = items(container);
    list.insert(list.end(), values.begin(), values.end());
  }
  /// A str of a unicode opcode: UTF-8, which Python decodes with surrogates allowed and
  /// refuses otherwise (torch.load fails on the file).
  std::uint32_t add_unicode(std::span<const std::byte> text) {
    const std::string_view view(reinterpret_cast<const char*>(text.data()), text.size());
    MOESTAT_CHECK(is_utf8(view, /*allow_surrogates=*/true),
                  "the pickle holds a string that is not UTF-8 (\"{}\"), which torch.load "
                  "refuses",
                  printable(view.substr(0, 64)));
    charge(sizeof(std::string) + text.size());
    strings_.emplace_back(reinterpret_cast<const char*>(text.data()), text.size());
    return add(NodeKind::kStr, std::int64_t(strings_.size() - 1));
  }
  const Node& node(std::uint32_t index) const { return nodes_[index]; }
  std::vector<std::uint32_t>& items(std::uint32_t index) {
    return items_[std::size_t(nodes_[index].payload)];
  }
  const std::string& str(std::uint32_t index) const {
    return strings_[std::size_t(nodes_[index].payload)];
  }

  void push(std::uint32_t index) {
    charge(sizeof(index));
    stack_.push_back(index);
  }
  std::uint32_t pop() {
    MOESTAT_CHECK(stack_.size() > stack_floor(), "pickle pops an empty stack at byte {}", pos_ - 1);
    const std::uint32_t top = stack_.back();
    stack_.pop_back();
    return top;
  }
  std::uint32_t top() const {
    MOESTAT_CHECK(stack_.size() > stack_floor(), "pickle reads an empty stack at byte {}",
                  pos_ - 1);
    return stack_.back();
  }
  std::size_t stack_floor() const { return marks_.empty() ? 0 : marks_.back(); }
  /// Everything above the last MARK, which is removed.
  std::vector<std::uint32_t> pop_to_mark() {
    MOESTAT_CHECK(!marks_.empty(), "pickle has no MARK before byte {}", pos_ - 1);
    const std::size_t mark = marks_.back();
    marks_.pop_back();
    std::vector<std::uint32_t> out(stack_.begin() + std::ptrdiff_t(mark), stack_.end());
    stack_.resize(mark);
    return out;
  }

  std::uint32_t expect(std::uint32_t index, NodeKind kind, std::string_view what) {
    MOESTAT_CHECK(node(index).kind == kind, "{}: expected a {}, got a {}", what, kind_name(kind),
                  kind_name(node(index).kind));
    return index;
  }

  // ---- executing ----

  std::uint32_t execute() {
    for (;;) {
      const std::uint8_t op = byte();
      switch (op) {
        case 0x80: {  // PROTO
          const std::uint8_t protocol = byte();
          MOESTAT_CHECK(protocol >= 2 && protocol <= 5, "pickle protocol {} is not supported",
                        protocol);
          break;
        }
        case 0x95:  // FRAME: a length hint only
          take(8);
          break;
        case '.': {  // STOP
          const std::uint32_t result = pop();
          MOESTAT_CHECK(marks_.empty(), "pickle stops with an open MARK");
          return result;
        }
        case '(':  // MARK
          charge(sizeof(std::size_t));
          marks_.push_back(stack_.size());
          break;
        case '0':  // POP
          pop();
          break;
        case '1':  // POP_MARK
          pop_to_mark();
          break;
        case 'N':
          push(add(NodeKind::kNone));
          break;
        case 0x88:  // NEWTRUE
          push(add(NodeKind::kBool, 1));
          break;
        case 0x89:  // NEWFALSE
          push(add(NodeKind::kBool, 0));
          break;
        case 'K':  // BININT1
          push(add(NodeKind::kInt, byte()));
          break;
        case 'M':  // BININT2
          push(add(NodeKind::kInt, little<std::uint16_t>()));
          break;
        case 'J':  // BININT
          push(add(NodeKind::kInt, little<std::int32_t>()));
          break;
        case 0x8a:  // LONG1: little-endian two's complement of n bytes
          push(add(NodeKind::kInt, long1()));
          break;
        case 'G': {  // BINFLOAT: big-endian double
          std::uint64_t bits = 0;
          for (std::byte b : take(8)) bits = (bits << 8) | std::uint64_t(b);
          push(add(NodeKind::kFloat, std::bit_cast<std::int64_t>(bits)));
          break;
        }
        case 'X':  // BINUNICODE
          push(add_unicode(take(little<std::uint32_t>())));
          break;
        case 0x8c:  // SHORT_BINUNICODE
          push(add_unicode(take(byte())));
          break;
        case '}':  // EMPTY_DICT
          push(add_container(NodeKind::kDict));
          break;
        case ']':  // EMPTY_LIST
          push(add_container(NodeKind::kList));
          break;
        case ')':  // EMPTY_TUPLE
          push(add_container(NodeKind::kTuple));
          break;
        case 0x85:    // TUPLE1
        case 0x86:    // TUPLE2
        case 0x87: {  // TUPLE3
          std::vector<std::uint32_t> values(std::size_t(op - 0x84));
          for (auto it = values.rbegin(); it != values.rend(); ++it) *it = pop();
          push(add_container(NodeKind::kTuple, std::move(values)));
          break;
        }
        case 't':  // TUPLE
          push(add_container(NodeKind::kTuple, pop_to_mark()));
          break;
        case 'a': {  // APPEND
          const std::uint32_t value = pop();
          extend(expect(top(), NodeKind::kList, "APPEND"), {&value, 1});
          break;
        }
        case 'e': {  // APPENDS
          const std::vector<std::uint32_t> values = pop_to_mark();
          extend(expect(top(), NodeKind::kList, "APPENDS"), values);
          break;
        }
        case 's': {  // SETITEM
          const std::uint32_t value = pop();
          const std::uint32_t key = pop();
          set_items(top(), {key, value});
          break;
        }
        case 'u': {  // SETITEMS
          std::vector<std::uint32_t> pairs = pop_to_mark();
          MOESTAT_CHECK(pairs.size() % 2 == 0, "SETITEMS with an odd number of values");
          set_items(top(), pairs);
          break;
        }
        case 'q':  // BINPUT
          memo_put(byte());
          break;
        case 'r':  // LONG_BINPUT
          memo_put(little<std::uint32_t>());
          break;
        case 0x94:  // MEMOIZE
          memo_put(std::uint32_t(memo_.size()));
          break;
        case 'h':  // BINGET
          push(memo_get(byte()));
          break;
        case 'j':  // LONG_BINGET
          push(memo_get(little<std::uint32_t>()));
          break;
        case 'c': {  // GLOBAL
          std::string module = line();
          std::string name = line();
          push(global(module, name));
          break;
        }
        case 0x93: {  // STACK_GLOBAL
          const std::uint32_t name = expect(pop(), NodeKind::kStr, "STACK_GLOBAL name");
          const std::uint32_t module = expect(pop(), NodeKind::kStr, "STACK_GLOBAL module");
          push(global(str(module), str(name)));
          break;
        }
        case 'Q':  // BINPERSID
          push(persistent_load(pop()));
          break;
        case 'R': {  // REDUCE
          const std::uint32_t args = expect(pop(), NodeKind::kTuple, "REDUCE arguments");
          const std::uint32_t callable = expect(pop(), NodeKind::kGlobal, "REDUCE callable");
          push(reduce(callable, args));
          break;
        }
        default:
          MOESTAT_FAIL("pickle opcode 0x{:02x} at byte {} is outside the subset moestat reads", op,
                       pos_ - 1);
      }
    }
  }

  std::int64_t long1() {
    const std::uint8_t size = byte();
    MOESTAT_CHECK(size <= 8, "integer of {} bytes does not fit 64 bits", size);
    const auto bytes = take(size);
    if (size == 0) return 0;
    std::uint64_t value = 0;
    for (std::size_t i = size; i-- > 0;) value = (value << 8) | std::uint64_t(bytes[i]);
    if (size < 8 && (std::uint8_t(bytes[size - 1]) & 0x80) != 0) {
      value |= ~std::uint64_t(0) << (8 * size);  // sign-extend
    }
    return std::bit_cast<std::int64_t>(value);
  }

  void memo_put(std::uint32_t key) {
    const std::uint32_t value = top();
    if (!memo_.contains(key)) charge(kMemoEntryBytes);
    memo_[key] = value;
  }

  std::uint32_t memo_get(std::uint32_t key) const {
    const auto found = memo_.find(key);
    MOESTAT_CHECK(found != memo_.end(), "pickle reads memo entry {} that was never stored", key);
    return found->second;
  }

  void set_items(std::uint32_t dict, const std::vector<std::uint32_t>& pairs) {
    expect(dict, NodeKind::kDict, "SETITEMS");
    for (std::size_t i = 0; i < pairs.size(); i += 2) {
      const NodeKind key = node(pairs[i]).kind;
      MOESTAT_CHECK(key == NodeKind::kStr || key == NodeKind::kInt,
                    "dict key of type {} is not supported (want str or int)", kind_name(key));
    }
    extend(dict, pairs);
  }

  /// Refuses a dict that sets one key twice. Python keeps the last value (so torch.load
  /// does), PtValue::find the first: the two would read different counts from one file.
  /// Sorting the keys takes 4 bytes a pair for the moment; the pairs took 8 when charged.
  void require_unique_keys(const std::vector<std::uint32_t>& pairs) const {
    std::vector<std::uint32_t> keys;
    keys.reserve(pairs.size() / 2);
    for (std::size_t i = 0; i < pairs.size(); i += 2) keys.push_back(pairs[i]);
    // Keys are str or int (set_items), and an int never equals a str.
    const auto less = [this](std::uint32_t a, std::uint32_t b) {
      if (node(a).kind != node(b).kind) return node(a).kind < node(b).kind;
      return node(a).kind == NodeKind::kStr ? str(a) < str(b) : node(a).payload < node(b).payload;
    };
    std::sort(keys.begin(), keys.end(), less);
    const auto twice = std::adjacent_find(
        keys.begin(), keys.end(), [&](auto a, auto b) { return !less(a, b) && !less(b, a); });
    if (twice == keys.end()) return;
    const std::string key = node(*twice).kind == NodeKind::kStr
                                ? fmt::format("\"{}\"", str(*twice))
                                : fmt::format("{}", node(*twice).payload);
    MOESTAT_FAIL(
        "a dict sets the key {} more than once: ambiguous (torch.load keeps the last value), "
        "so it is refused",
        key);
  }

  std::uint32_t global(const std::string& module, const std::string& name) {
    charge(sizeof(GlobalNode));
    globals_.emplace_back();
    GlobalNode& out = globals_.back();
    if (module == "torch._utils" && name == "_rebuild_tensor_v2") {
      out.global = Global::kRebuildTensorV2;
    } else if (module == "collections" && name == "OrderedDict") {
      out.global = Global::kOrderedDict;
    } else if (const auto dtype = storage_class_dtype(name); module == "torch" && dtype) {
      out.global = Global::kStorageClass;
      out.storage_dtype = *dtype;
    } else {
      MOESTAT_FAIL("pickle global {}.{} is outside the subset moestat reads", module.substr(0, 64),
                   name.substr(0, 64));
    }
    return add(NodeKind::kGlobal, std::int64_t(globals_.size() - 1));
  }

  std::uint32_t persistent_load(std::uint32_t pid) {
    const auto values = items(expect(pid, NodeKind::kTuple, "persistent id"));
    MOESTAT_CHECK(
        values.size() == 5 && node(values[0]).kind == NodeKind::kStr && str(values[0]) == "storage",
        "persistent id is not a (\"storage\", type, key, location, numel) tuple");
    const GlobalNode& type =
        globals_[std::size_t(node(expect(values[1], NodeKind::kGlobal, "storage type")).payload)];
    MOESTAT_CHECK(type.global == Global::kStorageClass, "storage type is not a storage class");
    StorageRef ref;
    ref.dtype = type.storage_dtype;
    ref.key = str(expect(values[2], NodeKind::kStr, "storage key"));
    ref.device = device_of_name(str(expect(values[3], NodeKind::kStr, "storage location")));
    ref.numel = node(expect(values[4], NodeKind::kInt, "storage size")).payload;
    MOESTAT_CHECK(ref.numel >= 0, "storage {} has negative size {}", ref.key, ref.numel);
    charge(sizeof(StorageRef) + ref.key.size());
    storages_.push_back(std::move(ref));
    return add(NodeKind::kStorage, std::int64_t(storages_.size() - 1));
  }

  std::vector<std::int64_t> int_tuple(std::uint32_t index, std::string_view what) {
    std::vector<std::int64_t> out;
    for (std::uint32_t item : items(expect(index, NodeKind::kTuple, what))) {
      out.push_back(node(expect(item, NodeKind::kInt, what)).payload);
    }
    return out;
  }

  std::uint32_t reduce(std::uint32_t callable, std::uint32_t args_index) {
    const GlobalNode& function = globals_[std::size_t(node(callable).payload)];
    const std::vector<std::uint32_t> args = items(args_index);
    if (function.global == Global::kOrderedDict) {
      MOESTAT_CHECK(args.empty(), "OrderedDict(...) with arguments is not supported");
      return add_container(NodeKind::kDict);
    }
    MOESTAT_CHECK(function.global == Global::kRebuildTensorV2, "a storage class is not callable");
    // (storage, storage_offset, size, stride, requires_grad, backward_hooks[, metadata])
    MOESTAT_CHECK(args.size() == 6 || args.size() == 7,
                  "_rebuild_tensor_v2 takes 6 or 7 arguments, got {}", args.size());
    TensorNode tensor;
    tensor.storage = expect(args[0], NodeKind::kStorage, "tensor storage");
    tensor.offset = node(expect(args[1], NodeKind::kInt, "tensor storage offset")).payload;
    tensor.shape = int_tuple(args[2], "tensor size");
    tensor.stride = int_tuple(args[3], "tensor stride");
    expect(args[4], NodeKind::kBool, "tensor requires_grad");
    expect(args[5], NodeKind::kDict, "tensor backward hooks");
    MOESTAT_CHECK(tensor.shape.size() == tensor.stride.size() && tensor.shape.size() <= kMaxDims,
                  "tensor with {} sizes and {} strides (at most {} dimensions)",
                  tensor.shape.size(), tensor.stride.size(), kMaxDims);
    charge(sizeof(TensorNode) + 2 * tensor.shape.size() * sizeof(std::int64_t));
    tensors_.push_back(std::move(tensor));
    return add(NodeKind::kTensor, std::int64_t(tensors_.size() - 1));
  }

  // ---- building the result ----

  /// Memory the result is about to take.
  void spend(std::size_t bytes) {
    budget_.spend(bytes, "the values read (a shared object counts at every reference)");
  }

  PtValue convert(std::uint32_t index, std::size_t depth) {
    MOESTAT_CHECK(depth <= max_depth_, "pickle nests deeper than {} levels (or refers to itself)",
                  max_depth_);
    // The PtValue itself is charged by its container (or is the root).
    const Node& n = node(index);
    switch (n.kind) {
      case NodeKind::kNone:
        return {};
      case NodeKind::kBool:
        return PtValue(n.payload != 0);
      case NodeKind::kInt:
        return PtValue(n.payload);
      case NodeKind::kFloat:
        return PtValue(std::bit_cast<double>(n.payload));
      case NodeKind::kStr:
        spend(str(index).size());
        return PtValue(str(index));
      case NodeKind::kList:
      case NodeKind::kTuple: {
        std::vector<PtValue> values;
        spend(items(index).size() * sizeof(PtValue));
        values.reserve(items(index).size());
        for (std::uint32_t item : items(index)) values.push_back(convert(item, depth + 1));
        if (n.kind == NodeKind::kList) return PtValue(std::move(values));
        return PtValue(PtTuple{std::move(values)});
      }
      case NodeKind::kDict: {
        const std::vector<std::uint32_t>& pairs = items(index);
        require_unique_keys(pairs);
        PtDict dict;
        spend(pairs.size() / 2 * sizeof(PtDict::value_type));
        dict.reserve(pairs.size() / 2);
        for (std::size_t i = 0; i < pairs.size(); i += 2) {
          dict.emplace_back(convert(pairs[i], depth + 1), convert(pairs[i + 1], depth + 1));
        }
        return PtValue(std::move(dict));
      }
      case NodeKind::kTensor:
        return PtValue(materialize(tensors_[std::size_t(n.payload)]));
      case NodeKind::kGlobal:
      case NodeKind::kStorage:
        break;
    }
    MOESTAT_FAIL("pickle holds a bare {}, not a value", kind_name(n.kind));
  }

  /// The tensor's elements, gathered row-major from its (possibly strided) storage view.
  HostTensor materialize(const TensorNode& node_data) {
    const StorageRef& ref = storages_[std::size_t(node(node_data.storage).payload)];
    HostTensor out;
    out.dtype = ref.dtype;
    out.device = ref.device;
    out.shape = node_data.shape;
    // Every size and stride non-negative, and the last element inside the storage: then
    // the element count is at most the storage's, which the loader checked against the file.
    std::int64_t numel = 1;
    std::int64_t last = node_data.offset;
    for (std::size_t axis = 0; axis < out.shape.size(); ++axis) {
      const std::int64_t size = out.shape[axis];
      const std::int64_t stride = node_data.stride[axis];
      MOESTAT_CHECK(size >= 0 && stride >= 0, "tensor has a negative size or stride");
      if (size == 0) numel = 0;
    }
    MOESTAT_CHECK(node_data.offset >= 0, "tensor has a negative storage offset");
    if (numel != 0) {
      MOESTAT_CHECK(node_data.offset < ref.numel, "tensor starts past the end of its storage ({})",
                    ref.numel);
      for (std::size_t axis = 0; axis < out.shape.size(); ++axis) {
        const std::int64_t size = out.shape[axis];
        MOESTAT_CHECK(size <= ref.numel && numel <= ref.numel / size,
                      "tensor of shape [{}] has more elements than its storage ({})",
                      fmt::join(out.shape, ", "), ref.numel);
        numel *= size;
        const std::int64_t stride = node_data.stride[axis];
        MOESTAT_CHECK(stride == 0 || size - 1 <= (ref.numel - 1 - last) / stride,
                      "tensor view runs past the end of its storage ({} elements)", ref.numel);
        last += (size - 1) * stride;
      }
      MOESTAT_CHECK(last < ref.numel, "tensor view runs past the end of its storage ({})",
                    ref.numel);
    }
    const std::size_t element = dtype_size(ref.dtype);
    const std::size_t bytes = std::size_t(numel) * element;
    spend(bytes);
    const std::span<const std::byte> storage = load_storage_(ref);
    MOESTAT_CHECK(storage.size() == std::size_t(ref.numel) * element,
                  "storage {} holds {} bytes, not {}", ref.key, storage.size(),
                  std::size_t(ref.numel) * element);
    out.data.resize(bytes);
    if (numel == 0) return out;
    // Walk the index space with an odometer; contiguous innermost runs are copied at once.
    const std::size_t dims = out.shape.size();
    std::vector<std::int64_t> index(dims, 0);
    std::size_t written = 0;
    const bool inner_contiguous = dims > 0 && node_data.stride[dims - 1] == 1;
    const std::int64_t run = inner_contiguous ? out.shape[dims - 1] : 1;
    const std::size_t outer_dims = inner_contiguous ? dims - 1 : dims;
    for (;;) {
      std::int64_t at = node_data.offset;
      for (std::size_t axis = 0; axis < outer_dims; ++axis) {
        at += index[axis] * node_data.stride[axis];
      }
      std::memcpy(out.data.data() + written, storage.data() + std::size_t(at) * element,
                  std::size_t(run) * element);
      written += std::size_t(run) * element;
      std::size_t axis = outer_dims;
      while (axis > 0) {
        --axis;
        if (++index[axis] < out.shape[axis]) break;
        index[axis] = 0;
        if (axis == 0) return out;
      }
      if (outer_dims == 0) return out;
    }
  }

  std::span<const std::byte> in_;
  std::size_t pos_ = 0;
  const StorageLoader& load_storage_;
  ReadBudget& budget_;
  std::size_t max_depth_;

  std::vector<Node> nodes_;
  std::vector<std::vector<std::uint32_t>> items_;
  std::vector<std::string> strings_;
  std::vector<GlobalNode> globals_;
  std::vector<StorageRef> storages_;
  std::vector<TensorNode> tensors_;
  std::vector<std::uint32_t> stack_;
  std::vector<std::size_t> marks_;
  std::unordered_map<std::uint32_t, std::uint32_t> memo_;
};

}  // namespace

PtValue unpickle(std::span<const std::byte> pickle, const StorageLoader& load_storage,
                 ReadBudget& budget, std::size_t max_depth) {
  return Unpickler(pickle, load_storage, budget, max_depth).run();
}

}  // namespace moestat::io::detail
