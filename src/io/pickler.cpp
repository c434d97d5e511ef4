// The pickler of the torch .pt subset: protocol 2, laid out as torch.save lays it out, so
// torch.load(weights_only=True) accepts it. No memo: nothing is shared, and the
// weights-only unpickler does not need one.
#include <bit>
#include <cstring>
#include <limits>
#include <moestat/error.hpp>
#include <moestat/printable.hpp>
#include <moestat/utf8.hpp>

#include "pickle.hpp"

namespace moestat::io::detail {
namespace {

std::string_view storage_class(DType dtype) {
  switch (dtype) {
    case DType::kInt32:
      return "IntStorage";
    case DType::kInt64:
      return "LongStorage";
    case DType::kFloat32:
      return "FloatStorage";
    case DType::kFloat64:
      return "DoubleStorage";
    case DType::kBool:
      return "BoolStorage";
    case DType::kUInt8:
      return "ByteStorage";
    case DType::kInt16:
      return "ShortStorage";
    case DType::kUInt16:
      break;
  }
  MOESTAT_FAIL("a .pt file cannot hold a {} tensor (torch has no legacy storage class of it)",
               dtype_name(dtype));
}

class Pickler {
 public:
  explicit Pickler(std::vector<const HostTensor*>& storages) : storages_(storages) {}

  std::string run(const PtValue& value) {
    out_ += "\x80\x02";  // PROTO 2
    save(value);
    out_ += '.';  // STOP
    return std::move(out_);
  }

 private:
  template <typename T>
  void little(T value) {
    char bytes[sizeof(T)];
    std::memcpy(bytes, &value, sizeof(T));
    out_.append(bytes, sizeof(T));
  }

  void save_int(std::int64_t value) {
    if (value >= 0 && value <= 0xff) {
      out_ += 'K';
      out_ += char(value);
    } else if (value >= 0 && value <= 0xffff) {
      out_ += 'M';
      little(std::uint16_t(value));
    } else if (value >= std::numeric_limits<std::int32_t>::min() &&
               value <= std::numeric_limits<std::int32_t>::max()) {
      out_ += 'J';
      little(std::int32_t(value));
    } else {
      out_ += "\x8a\x08";  // LONG1 of 8 bytes, two's complement
      little(value);
    }
  }

  void save_str(std::string_view text) {
    MOESTAT_CHECK(text.size() <= std::numeric_limits<std::uint32_t>::max(),
                  "string of {} bytes is too long for a pickle", text.size());
    // What the reader, and torch.load, refuse is never written.
    MOESTAT_CHECK(is_utf8(text, /*allow_surrogates=*/true),
                  "the string \"{}\" is not UTF-8, which a .pt file's strings must be",
                  printable(text.substr(0, 64)));
    out_ += 'X';
    little(std::uint32_t(text.size()));
    out_ += text;
  }

  void save_global(std::string_view module, std::string_view name) {
    out_ += 'c';
    out_ += module;
    out_ += '\n';
    out_ += name;
    out_ += '\n';
  }

  void save_int_tuple(const std::vector<std::int64_t>& values) {
    out_ += '(';
    for (std::int64_t value : values) save_int(value);
    out_ += 't';
  }

  // torch._utils._rebuild_tensor_v2(storage, 0, size, stride, False, OrderedDict())
  void save_tensor(const HostTensor& tensor) {
    MOESTAT_CHECK(tensor.data.size() == std::size_t(tensor.numel()) * dtype_size(tensor.dtype),
                  "tensor of shape [{}] and dtype {} holds {} bytes, not {}",
                  fmt::join(tensor.shape, ", "), dtype_name(tensor.dtype), tensor.data.size(),
                  std::size_t(tensor.numel()) * dtype_size(tensor.dtype));
    const std::size_t key = storages_.size();
    storages_.push_back(&tensor);
    save_global("torch._utils", "_rebuild_tensor_v2");
    out_ += '(';
    // The persistent id: ("storage", torch.XStorage, key, location, numel)
    out_ += '(';
    save_str("storage");
    save_global("torch", storage_class(tensor.dtype));
    save_str(std::to_string(key));
    save_str(device_name(tensor.device));
    save_int(tensor.numel());
    out_ += 't';
    out_ += 'Q';  // BINPERSID
    save_int(0);  // storage offset
    save_int_tuple(tensor.shape);
    std::vector<std::int64_t> stride(tensor.shape.size());
    std::int64_t step = 1;
    for (std::size_t axis = tensor.shape.size(); axis-- > 0;) {
      stride[axis] = step;
      step *= std::max<std::int64_t>(tensor.shape[axis], 1);
    }
    save_int_tuple(stride);
    out_ += '\x89';  // requires_grad = False
    save_global("collections", "OrderedDict");
    out_ += ")R";  // OrderedDict()
    out_ += "tR";  // the argument tuple, then the call
  }

  void save(const PtValue& value) {
    std::visit([this](const auto& v) { save_alternative(v); }, value.variant());
  }

  void save_alternative(std::monostate) { out_ += 'N'; }
  void save_alternative(bool value) { out_ += value ? '\x88' : '\x89'; }
  void save_alternative(std::int64_t value) { save_int(value); }
  void save_alternative(double value) {
    out_ += 'G';
    const auto bits = std::bit_cast<std::uint64_t>(value);
    for (int shift = 56; shift >= 0; shift -= 8) out_ += char((bits >> shift) & 0xff);
  }
  void save_alternative(const std::string& value) { save_str(value); }
  void save_alternative(const HostTensor& value) { save_tensor(value); }
  void save_alternative(const PtList& list) {
    out_ += ']';
    if (list.empty()) return;
    out_ += '(';
    for (const PtValue& item : list) save(item);
    out_ += 'e';  // APPENDS
  }
  void save_alternative(const PtTuple& tuple) {
    if (tuple.items.empty()) {
      out_ += ')';
      return;
    }
    out_ += '(';
    for (const PtValue& item : tuple.items) save(item);
    out_ += 't';
  }
  void save_alternative(const PtDict& dict) {
    out_ += '}';
    if (dict.empty()) return;
    out_ += '(';
    for (const auto& [key, item] : dict) {
      MOESTAT_CHECK(key.kind() == PtValue::Kind::kStr || key.kind() == PtValue::Kind::kInt,
                    "dict key of type {} cannot be written (want str or int)",
                    pt_kind_name(key.kind()));
      save(key);
      save(item);
    }
    out_ += 'u';  // SETITEMS
  }

  std::vector<const HostTensor*>& storages_;
  std::string out_;
};

}  // namespace

std::string pickle(const PtValue& value, std::vector<const HostTensor*>& storages) {
  return Pickler(storages).run(value);
}

}  // namespace moestat::io::detail
