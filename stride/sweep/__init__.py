"""Many small models at once: packed training (N models as one) and `stride sweep` (grids, Ray, report).

Layers, bottom up: vmap_ops / grouped_lstm (ops a pack needs), packed_model / packed_loss / packed_optim /
pack_data (the pack's model, loss, optimizer and batches), packed_train (the loop, = each model's solo
`stride train` run), packing / sizing (which points share a pack, how many), grid / store / jobs / runner
(the sweep), stats / report / report_files (the report), export (a point as a stride checkpoint). This
package sits beside stride.bench at the top: it imports train, models, data, optim, metrics, report and
checkpoint; nothing in stride imports it except the `stride sweep` command. docs/sweep.md explains it.
"""
