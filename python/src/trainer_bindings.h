// The Trainer half of tinycudann._C (trainer_bindings.cpp), registered by the module definition in
// bindings.cpp, which knows how to get the C++ module out of a package module object.
#pragma once

#include <tnn/module.h>

#include <pybind11/functional.h>
#include <pybind11/pybind11.h>

#include <functional>
#include <memory>

void bind_trainer(pybind11::module_& m,
                  const std::function<std::shared_ptr<tnn::Module>(pybind11::handle)>& module_of);
