package gpu

// Kernel names a kernel of compute/cuda/kernels/kernels.cu; the Go list and
// the PTX must agree (TestKernelListMatchesPTX).
type Kernel int

const (
	kFill Kernel = iota
	kCopy
	kAdd
	kAddTo
	kMul
	kReLU
	kReLUBwd
	kDropoutMask
	kBiasAct
	kActBwdSum
	kRowSum
	kIm2Col
	kCol2Im
	kConvOut
	kConvPoolOut
	kConvDyT
	kPool2ScatterT
	kMaxPool
	kMaxPoolBwd
	kAvgPool
	kAvgPoolBwd
	kBNTrain
	kBNEval
	kBNBwd
	kSoftmaxXent
	kSGD
	kAdam
	// NumKernels counts the kernels.
	NumKernels
)

// KernelNames are the kernels' entry points in the PTX, by Kernel.
var KernelNames = [NumKernels]string{
	kFill: "tt_fill", kCopy: "tt_copy", kAdd: "tt_add", kAddTo: "tt_addto", kMul: "tt_mul",
	kReLU: "tt_relu", kReLUBwd: "tt_relu_bwd", kDropoutMask: "tt_dropout_mask", kBiasAct: "tt_bias_act",
	kActBwdSum: "tt_act_bwd_sum", kRowSum: "tt_rowsum", kIm2Col: "tt_im2col", kCol2Im: "tt_col2im",
	kConvOut: "tt_conv_out", kConvPoolOut: "tt_conv_pool_out", kConvDyT: "tt_conv_dy_t",
	kPool2ScatterT: "tt_pool2_scatter_t", kMaxPool: "tt_maxpool", kMaxPoolBwd: "tt_maxpool_bwd",
	kAvgPool: "tt_avgpool", kAvgPoolBwd: "tt_avgpool_bwd", kBNTrain: "tt_bn_train", kBNEval: "tt_bn_eval",
	kBNBwd: "tt_bn_bwd", kSoftmaxXent: "tt_softmax_xent", kSGD: "tt_sgd", kAdam: "tt_adam",
}

func (k Kernel) String() string {
	if k >= 0 && k < NumKernels {
		return KernelNames[k]
	}
	return "kernel?"
}

// redThreads is TT_RED of kernels.cu: the block size of every reduction
// kernel (one block per channel or row).
const redThreads = 256

// blockThreads is the block size of grid-stride kernels.
const blockThreads = 256
