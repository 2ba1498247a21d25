#!/usr/bin/env python3
"""A consumer of neuron-monitor's JSON, written from its documented input (neuron-monitor user
guide, "The JSON output format"; what neuron-monitor-prometheus.py and the CloudWatch agent's
Neuron scrape read). Reads one report per line on stdin, turns every documented group it finds
into prometheus_client gauges the way neuron-monitor-prometheus.py names them, and prints the
exposition. Any missing key or wrong type is an error (exit 1), as it is for AWS's script.
"""
import json
import sys

from prometheus_client import CollectorRegistry, Gauge, generate_latest

INSTANCE = [('instance_name', 'instance_name'), ('instance_id', 'instance_id'),
            ('instance_type', 'instance_type'), ('availability_zone', 'instance_availability_zone'),
            ('region', 'instance_region'), ('subnet_id', 'subnet_id')]
CORE_CLASSES = ['constants', 'model_code', 'model_shared_scratchpad', 'runtime_memory', 'tensors']
HOST_CLASSES = ['application_memory', 'constants', 'dma_buffers', 'tensors']
SG_DEVICE = ['constants', 'model_code', 'runtime_memory', 'tensors']


def need(cond, what):
    if not cond:
        raise ValueError(what)


def main():
    reg = CollectorRegistry()
    gauges = {}

    def gauge(name, labels):
        if name not in gauges:
            gauges[name] = Gauge(name, name, sorted(labels), registry=reg)
        return gauges[name].labels(**labels)

    n = 0
    for line in sys.stdin:
        r = json.loads(line)
        n += 1
        ii = r['instance_info']
        need(isinstance(ii['error'], str), 'instance_info.error')
        inst = {label: str(ii[key]) for label, key in INSTANCE}
        hw = r['neuron_hardware_info']
        for k in ['neuron_device_count', 'neuroncore_per_device_count']:
            need(isinstance(hw[k], int), 'neuron_hardware_info.' + k)
        need(isinstance(hw['error'], str), 'neuron_hardware_info.error')
        gauge('neuron_hardware_info', dict(inst, neuron_device_count=str(hw['neuron_device_count']),
              neuroncore_per_device_count=str(hw['neuroncore_per_device_count']))).set(1)
        gauge('instance_info', inst).set(1)
        for rt in r['neuron_runtime_data']:
            need(isinstance(rt['pid'], int), 'pid')
            need(isinstance(rt['address'], str), 'address')
            tag = rt['neuron_runtime_tag']
            need(isinstance(tag, str) and tag, 'neuron_runtime_tag')
            if rt['error'] != '':
                continue
            for group, data in rt['report'].items():
                need(isinstance(data['error'], str), group + '.error')
                if group != 'memory_used' or data['error'] != '':
                    continue
                need(isinstance(data['period'], (int, float)), 'memory_used.period')
                used = data['neuron_runtime_used_bytes']
                labels = dict(inst, runtime_tag=tag)
                for loc in ['host', 'neuron_device']:
                    gauge('neuron_runtime_memory_used_bytes', dict(labels, memory_location=loc)).set(used[loc])
                bd = used['usage_breakdown']
                need(sum(bd['host'][c] for c in HOST_CLASSES) == used['host'], 'host breakdown sums')
                dev = 0
                for nc, row in bd['neuroncore_memory_usage'].items():
                    int(nc)
                    for c in CORE_CLASSES:
                        dev += row[c]
                        gauge('neuroncore_memory_usage_' + c,
                              dict(labels, memory_location='None', neuroncore=nc)).set(row[c])
                need(dev == used['neuron_device'], 'neuroncore breakdown sums to neuron_device')
                for m in data['loaded_models']:
                    for k, t in [('name', str), ('uuid', str), ('model_id', int), ('is_running', bool)]:
                        need(isinstance(m[k], t), 'loaded_models.' + k)
                    for sg_name, sg in m['subgraphs'].items():
                        mu = sg['memory_used_bytes']
                        need(sum(mu['usage_breakdown']['neuron_device'][c] for c in SG_DEVICE)
                             == mu['neuron_device'], sg_name + ' device sums')
                        need(sum(mu['usage_breakdown']['host'][c] for c in HOST_CLASSES)
                             == mu['host'], sg_name + ' host sums')
                        int(sg['neuroncore_index'])
                        int(sg['neuron_device_index'])
        sd = r['system_data']
        mi = sd['memory_info']
        if mi['error'] == '':
            for k in ['memory_total_bytes', 'memory_used_bytes', 'swap_total_bytes', 'swap_used_bytes']:
                gauge('system_' + k.replace('memory_', 'memory_').replace('swap_', 'swap_'), inst).set(mi[k])
        vu = sd['vcpu_usage']
        if vu['error'] == '':
            gauge('system_vcpu_count', inst).set(len(vu['usage_data']))
            a = vu['average_usage']
            user = min(a['user'] + a['nice'], 100.0)
            system = min(a['system'] + a['io_wait'] + a['irq'] + a['soft_irq'], 100.0)
            gauge('system_vcpu_usage_ratio', dict(inst, usage_type='user')).set(user / 100)
            gauge('system_vcpu_usage_ratio', dict(inst, usage_type='system')).set(system / 100)
            need(isinstance(vu['context_switch_count'], int), 'context_switch_count')
    need(n > 0, 'no report on stdin')
    sys.stdout.write(generate_latest(reg).decode())


if __name__ == '__main__':
    try:
        main()
    except (KeyError, TypeError, ValueError) as e:
        print('neuron-monitor JSON rejected: {!r}'.format(e), file=sys.stderr)
        sys.exit(1)
