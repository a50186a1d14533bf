// The IR's text form: printing and a small recursive-descent parser for it.
#include "compile/ir/text_format.h"

#include <cctype>
#include <charconv>
#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace tsp::ir {

namespace {

bool plainNameChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '/' || c == '-';
}

std::string nameText(const std::string& name) {
  bool plain = !name.empty();
  for (char c : name) plain = plain && plainNameChar(c);
  if (plain) return "%" + name;
  std::string quoted = "%\"";
  for (char c : name) {
    if (c == '"' || c == '\\') quoted += '\\';
    quoted += c;
  }
  return quoted + "\"";
}

// Shortest text that reads back to the same double, always marked as a float.
std::string floatText(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  std::string s = fmt::format("{}", v);
  if (s.find_first_of(".eE") == std::string::npos) s += ".0";
  return s;
}

std::string valueText(double v, DType dtype) {
  if (isFloat(dtype)) return floatText(v);
  return fmt::format("{}", static_cast<std::int64_t>(v));
}

std::string attrText(const AttrValue& value) {
  if (auto* i = std::get_if<std::int64_t>(&value)) return fmt::format("{}", *i);
  if (auto* f = std::get_if<double>(&value)) return floatText(*f);
  if (auto* is = std::get_if<std::vector<std::int64_t>>(&value)) return fmt::format("[{}]", fmt::join(*is, ", "));
  if (auto* fs = std::get_if<std::vector<double>>(&value)) {
    std::vector<std::string> parts;
    for (double f : *fs) parts.push_back(floatText(f));
    return fmt::format("[{}]", fmt::join(parts, ", "));
  }
  std::string quoted = "\"";
  for (char c : std::get<std::string>(value)) {
    if (c == '"' || c == '\\') quoted += '\\';
    quoted += c;
  }
  return quoted + "\"";
}

std::string typeText(const Tensor& t) { return fmt::format("{}[{}]", dtypeName(t.dtype), fmt::join(t.shape, ",")); }

}  // namespace

std::string Graph::print() const {
  std::string text;
  auto decl = [&](const char* keyword, TensorId id) {
    text += fmt::format("{} {}: {}", keyword, nameText(tensors_[id].name), typeText(tensors_[id]));
  };
  for (TensorId id : inputs_) decl("input", id), text += "\n";
  for (TensorId id : weights_) decl("weight", id), text += "\n";
  for (TensorId id : states_) decl("state", id), text += "\n";
  for (TensorId id : constants_) {
    decl("const", id);
    std::vector<std::string> values;
    for (double v : *tensors_[id].data) values.push_back(valueText(v, tensors_[id].dtype));
    text += fmt::format(" = [{}]\n", fmt::join(values, ", "));
  }
  for (const auto& op : ops_) {
    std::vector<std::string> outs, ins, attrs;
    for (TensorId o : op.outputs) outs.push_back(fmt::format("{}: {}", nameText(tensors_[o].name), typeText(tensors_[o])));
    for (TensorId i : op.inputs) ins.push_back(nameText(tensors_[i].name));
    for (const auto& [key, value] : op.attrs) attrs.push_back(fmt::format("{} = {}", key, attrText(value)));
    text += fmt::format("{}{}{} {}{}{} @{}\n", fmt::join(outs, ", "), outs.empty() ? "" : " = ", opKindName(op.kind),
                        nameText(op.name), ins.empty() ? "" : fmt::format("({})", fmt::join(ins, ", ")),
                        attrs.empty() ? "" : fmt::format(" {{{}}}", fmt::join(attrs, ", ")), op.layer);
  }
  for (TensorId id : outputs_) text += fmt::format("output {}\n", nameText(tensors_[id].name));
  return text;
}

namespace {

// Reads the text form line by line with a cursor; every error carries line and column.
class Parser {
 public:
  Parser(const std::string& text, std::string file) : text_(text), file_(std::move(file)) {}

  Expected<Graph> run() {
    while (true) {
      skipSpaceAndComments(true);
      if (pos_ >= text_.size()) break;
      if (auto s = statement(); !s) return s.error();
    }
    return std::move(graph_);
  }

 private:
  Diagnostic error(const std::string& message) const {
    return Diagnostic{ExitCode::kModel, {file_, line_, static_cast<int>(pos_ - lineStart_) + 1, ""}, message};
  }

  void skipSpaceAndComments(bool newlines) {
    while (pos_ < text_.size()) {
      const char c = text_[pos_];
      if (c == '\n') {
        if (!newlines) return;
        ++pos_;
        ++line_;
        lineStart_ = pos_;
      } else if (c == ' ' || c == '\t' || c == '\r') {
        ++pos_;
      } else if (c == '/' && pos_ + 1 < text_.size() && text_[pos_ + 1] == '/') {
        while (pos_ < text_.size() && text_[pos_] != '\n') ++pos_;
      } else {
        return;
      }
    }
  }

  bool accept(char c) {
    skipSpaceAndComments(false);
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }

  Status expect(char c) {
    if (!accept(c)) return error(fmt::format("expected '{}'", c));
    return {};
  }

  std::string word() {
    skipSpaceAndComments(false);
    const size_t start = pos_;
    while (pos_ < text_.size() && (std::isalnum(static_cast<unsigned char>(text_[pos_])) || text_[pos_] == '_')) ++pos_;
    return text_.substr(start, pos_ - start);
  }

  Expected<std::string> quoted() {
    std::string out;
    ++pos_;  // the opening quote
    while (pos_ < text_.size() && text_[pos_] != '"') {
      if (text_[pos_] == '\\' && pos_ + 1 < text_.size()) ++pos_;
      if (text_[pos_] == '\n') return error("unterminated string");
      out += text_[pos_++];
    }
    if (pos_ >= text_.size()) return error("unterminated string");
    ++pos_;
    return out;
  }

  Expected<std::string> name() {
    skipSpaceAndComments(false);
    if (pos_ >= text_.size() || text_[pos_] != '%') return error("expected a %name");
    ++pos_;
    if (pos_ < text_.size() && text_[pos_] == '"') return quoted();
    const size_t start = pos_;
    while (pos_ < text_.size() && plainNameChar(text_[pos_])) ++pos_;
    if (pos_ == start) return error("empty name");
    return text_.substr(start, pos_ - start);
  }

  Expected<double> number() {
    skipSpaceAndComments(false);
    const size_t start = pos_;
    while (pos_ < text_.size() && (std::isalnum(static_cast<unsigned char>(text_[pos_])) || text_[pos_] == '.' ||
                                   text_[pos_] == '-' || text_[pos_] == '+'))
      ++pos_;
    const std::string token = text_.substr(start, pos_ - start);
    if (token == "nan") return std::nan("");
    if (token == "inf") return HUGE_VAL;
    if (token == "-inf") return -HUGE_VAL;
    double v = 0;
    auto [end, ec] = std::from_chars(token.data(), token.data() + token.size(), v);
    if (token.empty() || ec != std::errc() || end != token.data() + token.size()) {
      pos_ = start;
      return error(fmt::format("expected a number, got '{}'", token));
    }
    return v;
  }

  // A number token: integer unless it has a '.', an exponent, or is nan/inf.
  Expected<AttrValue> scalar() {
    skipSpaceAndComments(false);
    const size_t start = pos_;
    auto v = number();
    if (!v) return v.error();
    const std::string token = text_.substr(start, pos_ - start);
    if (token.find_first_of(".eEni") != std::string::npos) return AttrValue{*v};
    std::int64_t i = 0;
    std::from_chars(token.data(), token.data() + token.size(), i);
    return AttrValue{i};
  }

  Expected<TensorType> type() {
    skipSpaceAndComments(false);
    const size_t start = pos_;
    const std::string dtypeWord = word();
    auto dtype = parseDType(dtypeWord);
    if (!dtype) {
      pos_ = start;
      return error(fmt::format("unknown dtype '{}'", dtypeWord));
    }
    TensorType t;
    t.dtype = *dtype;
    if (auto s = expect('['); !s) return s.error();
    if (!accept(']')) {
      do {
        auto v = number();
        if (!v) return v.error();
        t.shape.push_back(static_cast<std::int64_t>(*v));
      } while (accept(','));
      if (auto s = expect(']'); !s) return s.error();
    }
    return t;
  }

  Expected<TensorId> use() {
    const size_t start = pos_;
    auto n = name();
    if (!n) return n.error();
    auto id = graph_.findTensor(*n);
    if (!id) {
      pos_ = start;
      skipSpaceAndComments(false);
      return error(fmt::format("unknown tensor '%{}'", *n));
    }
    return *id;
  }

  Status statement() {
    const size_t start = pos_;
    const std::string keyword = word();
    if (keyword == "input" || keyword == "weight" || keyword == "state" || keyword == "const") {
      auto n = name();
      if (!n) return n.error();
      if (graph_.findTensor(*n)) return error(fmt::format("tensor '%{}' is defined twice", *n));
      if (auto s = expect(':'); !s) return s.error();
      auto t = type();
      if (!t) return t.error();
      if (keyword == "input") graph_.addInput(*n, t->shape, t->dtype);
      if (keyword == "weight") graph_.addWeight(*n, t->shape, t->dtype);
      if (keyword == "state") graph_.addState(*n, t->shape, t->dtype);
      if (keyword == "const") {
        if (auto s = expect('='); !s) return s.error();
        if (auto s = expect('['); !s) return s.error();
        auto values = std::make_shared<std::vector<double>>();
        if (!accept(']')) {
          do {
            auto v = number();
            if (!v) return v.error();
            values->push_back(*v);
          } while (accept(','));
          if (auto s = expect(']'); !s) return s.error();
        }
        std::int64_t elements = 1;
        for (auto d : t->shape) elements *= d;
        if (static_cast<std::int64_t>(values->size()) != elements)
          return error(fmt::format("constant '%{}' has {} values for {} elements", *n, values->size(), elements));
        graph_.addConstant(*n, t->shape, t->dtype, *values);
      }
      return endOfLine();
    }
    if (keyword == "output") {
      auto id = use();
      if (!id) return id.error();
      graph_.markOutput(*id);
      return endOfLine();
    }
    pos_ = start;
    // An op: [outs =] Kind %name[(ins)] [{attrs}] @layer
    std::vector<std::string> outNames;
    std::vector<TensorType> outTypes;
    skipSpaceAndComments(false);
    if (pos_ < text_.size() && text_[pos_] == '%') {
      do {
        auto n = name();
        if (!n) return n.error();
        if (graph_.findTensor(*n)) return error(fmt::format("tensor '%{}' is defined twice", *n));
        if (auto s = expect(':'); !s) return s.error();
        auto t = type();
        if (!t) return t.error();
        outNames.push_back(*n);
        outTypes.push_back(*t);
      } while (accept(','));
      if (auto s = expect('='); !s) return s.error();
    }
    skipSpaceAndComments(false);
    const size_t kindAt = pos_;
    const std::string kindWord = word();
    auto kind = parseOpKind(kindWord);
    if (!kind) {
      pos_ = kindAt;
      return error(fmt::format("unknown op kind '{}'", kindWord));
    }
    auto opName = name();
    if (!opName) return opName.error();
    std::vector<TensorId> inputs;
    if (accept('(')) {
      if (!accept(')')) {
        do {
          auto id = use();
          if (!id) return id.error();
          inputs.push_back(*id);
        } while (accept(','));
        if (auto s = expect(')'); !s) return s.error();
      }
    }
    Attrs attrs;
    if (accept('{')) {
      if (!accept('}')) {
        do {
          const std::string key = word();
          if (key.empty()) return error("expected an attribute name");
          if (auto s = expect('='); !s) return s.error();
          auto value = attrValue();
          if (!value) return value.error();
          attrs[key] = *value;
        } while (accept(','));
        if (auto s = expect('}'); !s) return s.error();
      }
    }
    if (auto s = expect('@'); !s) return s.error();
    auto layer = number();
    if (!layer) return layer.error();
    const int line = line_;
    const int column = static_cast<int>(kindAt - lineStart_) + 1;
    auto outs = graph_.addMultiOp(*kind, *opName, inputs, attrs, static_cast<int>(*layer), outNames);
    if (!outs) {
      Diagnostic d = outs.error();
      d.where.file = file_;
      d.where.line = line;
      d.where.column = column;
      return d;
    }
    if (outs->size() != outNames.size())
      return Diagnostic{ExitCode::kModel, {file_, line, column, *opName},
                        fmt::format("{} has {} outputs, the text names {}", kindWord, outs->size(), outNames.size())};
    for (size_t i = 0; i < outs->size(); ++i) {
      const Tensor& t = graph_.tensor((*outs)[i]);
      if (t.shape != outTypes[i].shape || t.dtype != outTypes[i].dtype)
        return Diagnostic{ExitCode::kModel, {file_, line, column, *opName},
                          fmt::format("output '%{}' is declared {}[{}] but inferred {}[{}]", outNames[i],
                                      dtypeName(outTypes[i].dtype), fmt::join(outTypes[i].shape, ","),
                                      dtypeName(t.dtype), fmt::join(t.shape, ","))};
    }
    return endOfLine();
  }

  Expected<AttrValue> attrValue() {
    skipSpaceAndComments(false);
    if (pos_ < text_.size() && text_[pos_] == '"') {
      auto s = quoted();
      if (!s) return s.error();
      return AttrValue{*s};
    }
    if (!accept('[')) return scalar();
    std::vector<AttrValue> items;
    if (!accept(']')) {
      do {
        auto v = scalar();
        if (!v) return v.error();
        items.push_back(*v);
      } while (accept(','));
      if (auto s = expect(']'); !s) return s.error();
    }
    bool anyFloat = false;
    for (const auto& v : items) anyFloat = anyFloat || std::holds_alternative<double>(v);
    if (anyFloat) {
      std::vector<double> fs;
      for (const auto& v : items)
        fs.push_back(std::holds_alternative<double>(v) ? std::get<double>(v)
                                                       : static_cast<double>(std::get<std::int64_t>(v)));
      return AttrValue{fs};
    }
    std::vector<std::int64_t> is;
    for (const auto& v : items) is.push_back(std::get<std::int64_t>(v));
    return AttrValue{is};
  }

  Status endOfLine() {
    skipSpaceAndComments(false);
    if (pos_ < text_.size() && text_[pos_] != '\n') return error("unexpected text at the end of the line");
    return {};
  }

  const std::string& text_;
  std::string file_;
  size_t pos_ = 0;
  size_t lineStart_ = 0;
  int line_ = 1;
  Graph graph_;
};

}  // namespace

Expected<Graph> parseGraph(const std::string& text, const std::string& file) { return Parser(text, file).run(); }

}  // namespace tsp::ir
