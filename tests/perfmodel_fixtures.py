"""A synthetic profile whose answers can be computed by hand (tests of the planner, the step-time
functions and the dashboards' what-if curves)."""
from workbench.perfmodel.profile import Profile


def synthetic_profile(t_c: float = 1e-3, t_f: float = 1e-4, params_conv: int = 1000, params_fc: int = 9000,
                      codec_s: float = 1e-3, ratio: int = 32, **kw) -> Profile:
    """Batch 10; one DDP bucket of the whole model; two compressors: ``powersgd`` (an all-reduce of
    1/ratio of the bytes, ``codec_s`` of encode+decode) and ``topk`` (an all-gather of 1/ratio)."""
    p = params_conv + params_fc
    args = dict(model="m", data="d", input_shape=(1, 8, 8), batch=10, ranks=4,
                t_c_at=(t_c, 2 * t_c, 3 * t_c, 4 * t_c), t_f_at=(t_f, 2 * t_f, 3 * t_f, 4 * t_f),
                fwd_share=0.25, u=1e-8, alpha=1e-5, beta=1e9, beta_allreduce=5e8, boundary=50,
                params_conv=params_conv, params_fc=params_fc, param_shapes=[(params_conv,), (params_fc,)],
                bucket_cap_mb=25.0, buckets=[{"numel": p, "shapes": [[params_fc], [params_conv]]}],
                codecs={"powersgd": {"collective": "allreduce", "codec_s": [codec_s],
                                  "payloads": [[{"collective": "allreduce", "bytes": 4 * p // ratio, "category": "compressed"}]]},
                        "topk": {"collective": "allgather", "codec_s": [codec_s],
                                   "payloads": [[{"collective": "allgather", "bytes": 4 * p // ratio, "category": "compressed"}]]}})
    args.update(kw)
    return Profile(**args)
