"""Recording from model libraries. Each adapter is imported explicitly (it needs that library,
which the rest of moestat does not):

    from moestat.integrations import transformers as moestat_hf
    handle = moestat_hf.attach(model, recorder)
"""
