// Expected<T>: a value or a Diagnostic, the way every layer reports a user's mistake.
#pragma once

#include <cassert>
#include <utility>
#include <variant>

#include "support/diagnostic.h"

namespace tsp {

/// A value of type T or the Diagnostic explaining why there is none.
template <typename T>
class [[nodiscard]] Expected {
 public:
  Expected(T value) : state_(std::move(value)) {}  // NOLINT: implicit by design
  Expected(Diagnostic error) : state_(std::move(error)) {}  // NOLINT

  bool ok() const { return state_.index() == 0; }
  explicit operator bool() const { return ok(); }

  T& value() & { assert(ok() && "value() on an error"); return std::get<0>(state_); }
  const T& value() const& { assert(ok() && "value() on an error"); return std::get<0>(state_); }
  T&& value() && { assert(ok() && "value() on an error"); return std::get<0>(std::move(state_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

  const Diagnostic& error() const { assert(!ok() && "error() on a value"); return std::get<1>(state_); }

 private:
  std::variant<T, Diagnostic> state_;
};

/// Expected<void>: success or a Diagnostic.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Diagnostic error) : error_(std::move(error)), ok_(false) {}  // NOLINT
  bool ok() const { return ok_; }
  explicit operator bool() const { return ok_; }
  const Diagnostic& error() const { assert(!ok_ && "error() on success"); return error_; }

 private:
  Diagnostic error_;
  bool ok_ = true;
};

}  // namespace tsp
