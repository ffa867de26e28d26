// The umbrella header of tiny-rdna4-nn's C++ API.
#pragma once

#include <tnn/checkpoint.h>
#include <tnn/config.h>
#include <tnn/dtype.h>
#include <tnn/encoding.h>
#include <tnn/error.h>
#include <tnn/loss.h>
#include <tnn/model.h>
#include <tnn/module.h>
#include <tnn/network.h>
#include <tnn/optimizer.h>
#include <tnn/runtime.h>
#include <tnn/tensor.h>
#include <tnn/trainer.h>
