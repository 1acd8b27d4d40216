"""ESP Explorer's view layer: pure functions from step traces to Plotly figures and Gradio values.

Nothing here loads or calls a model; every builder takes `StepTrace` objects or their JSON dicts.
"""
